//! The one way out for a CLI that runs its own tools: a loopback `CONNECT`
//! proxy that tunnels to the model's endpoint and refuses everything else.
//! Landlock then lets the CLI connect to this proxy's port and the MCP
//! server's, and to no other TCP port.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 8 << 10;

/// The model's endpoint, from its base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The host, as the URL names it (brackets removed).
    pub(crate) host: String,
    /// The port, the scheme's default if the URL names none.
    pub(crate) port: u16,
}

impl Endpoint {
    /// Reads `scheme://host[:port]/…`.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("the base URL `{url}` cannot be read: {e}"))?;
        let default = match uri.scheme_str() {
            Some("https") => 443,
            Some("http") => 80,
            _ => return Err(format!("the base URL `{url}` must start with http:// or https://")),
        };
        let host = uri.host().ok_or_else(|| format!("the base URL `{url}` names no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        Ok(Endpoint { host, port: uri.port_u16().unwrap_or(default) })
    }

    /// Whether it is on this machine, where the CLI may connect to it
    /// directly.
    pub(crate) fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// Serves the proxy on `listener` until dropped (abort its task): each
/// connection may open one tunnel, to `allowed` only.
pub(crate) async fn serve(listener: TcpListener, allowed: Endpoint) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        let allowed = allowed.clone();
        tokio::spawn(async move {
            let _ = tunnel(client, &allowed).await;
        });
    }
}

async fn tunnel(mut client: TcpStream, allowed: &Endpoint) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client.read(&mut chunk).await?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_string();
    let target = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["CONNECT", target, _] => target.to_string(),
        _ => return refuse(&mut client, "only CONNECT to the model's endpoint is allowed").await,
    };
    let wanted = Endpoint::parse(&format!("https://{target}")).ok();
    if wanted.as_ref() != Some(allowed) {
        tracing::warn!(target: "nexo::claude_code", "refused a connection to {target}: the CLI may reach only {}:{}", allowed.host, allowed.port);
        return refuse(&mut client, "nexo lets the Claude Code CLI reach its model's endpoint only").await;
    }
    let mut upstream = TcpStream::connect((allowed.host.as_str(), allowed.port)).await?;
    client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

async fn refuse(client: &mut TcpStream, why: &str) -> std::io::Result<()> {
    let body = format!("{why}\n");
    let response = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(response.as_bytes()).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure should panic

    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("https://api.anthropic.com").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.is_loopback()), ("api.anthropic.com", 443, false));
        let e = Endpoint::parse("http://127.0.0.1:8080/v1").unwrap();
        assert_eq!((e.port, e.is_loopback()), (8080, true));
        assert!(Endpoint::parse("http://[::1]:9/").unwrap().is_loopback());
        assert!(Endpoint::parse("ftp://x").is_err());
    }

    async fn ask(proxy: u16, request: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", proxy)).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 256];
        let n = s.read(&mut buf).await.unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[tokio::test]
    async fn tunnels_to_the_endpoint_and_nowhere_else() {
        // The "model": a loopback server that greets.
        let model = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = model.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = model.accept().await {
                let _ = s.write_all(b"hello from the model").await;
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = listener.local_addr().unwrap().port();
        let task = tokio::spawn(serve(listener, Endpoint { host: "127.0.0.1".into(), port }));
        let reply = ask(proxy, &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nhost: x\r\n\r\n")).await;
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        let other = ask(proxy, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 403") && other.contains("model's endpoint only"), "{other}");
        let get = ask(proxy, "GET http://example.com/ HTTP/1.1\r\n\r\n").await;
        assert!(get.starts_with("HTTP/1.1 403"), "{get}");
        task.abort();
    }
}
