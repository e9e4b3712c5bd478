//! The OTLP receiver answers as a collector does, and records what it could
//! not decode instead of dropping it.

use std::io::{Read, Write};
use std::net::TcpStream;

fn post(endpoint: &str, path: &str, body: &[u8]) -> String {
    let addr = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).unwrap_or_else(|e| panic!("{e}"));
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap_or_else(|e| panic!("{e}"));
    answer
}

#[test]
fn decodes_a_span_and_reports_a_malformed_export() {
    let Some(receiver) = nexo_testkit::otlp::Receiver::start("decodes_a_span_and_reports_a_malformed_export") else {
        return;
    };
    // ExportTraceServiceRequest { resource_spans: [{ scope_spans: [{ spans: [{ trace_id, span_id, name: "probe" }] }] }] },
    // encoded by hand so the test does not lean on the exporter it is there to check.
    let span = [&[0x0a, 16][..], &[0xab; 16], &[0x12, 8], &[0xcd; 8], &[0x2a, 5], b"probe"].concat();
    let scope_spans = [&[0x12, span.len() as u8][..], &span].concat();
    let resource_spans = [&[0x12, scope_spans.len() as u8][..], &scope_spans].concat();
    let request = [&[0x0a, resource_spans.len() as u8][..], &resource_spans].concat();
    let answer = post(&receiver.endpoint(), "/v1/traces", &request);
    assert!(answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"), "{answer}");
    let spans = receiver.wait_for_spans(std::time::Duration::from_secs(10), |s| !s.is_empty());
    assert_eq!(spans[0]["name"], "probe");
    assert_eq!(spans[0]["trace_id"], "ab".repeat(16));
    assert_eq!(spans[0]["span_id"], "cd".repeat(8));
    assert_eq!(receiver.raw_bytes(), request);

    let answer = post(&receiver.endpoint(), "/v1/traces", &[0xff, 0xff, 0xff]);
    assert!(answer.contains(" 400 "), "a malformed export must be refused: {answer}");
    assert_eq!(receiver.spans().len(), 1);
}
