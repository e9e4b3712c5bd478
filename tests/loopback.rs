//! A loopback HTTP/1.1 server with one canned answer, for tests that drive
//! the `nexo` binary against a real socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::{Receiver, channel};

/// Serves every request with `status` (e.g. `200 OK`) and a JSON `body`,
/// and sends each request line (`POST /v1/chat/completions HTTP/1.1`) to
/// the returned receiver. Returns the port.
pub fn json_server(status: &'static str, body: String) -> (u16, Receiver<String>) {
    let listener = match std::net::TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => panic!("cannot bind a loopback port: {e}"),
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let Ok(read_half) = stream.try_clone() else { continue };
            let mut reader = BufReader::new(read_half);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut request_body = vec![0u8; length];
            let _ = reader.read_exact(&mut request_body);
            let _ = tx.send(request_line.trim().to_string());
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, rx)
}
