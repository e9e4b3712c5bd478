//! The one guarded HTTP client every nexo egress path uses: the agent `fetch`
//! tool, the outbound HTTP of search-backend components, and the model
//! providers' API calls.
//!
//! Egress is denied by default. A request goes out only if every hop — the
//! first URL and each redirect — passes all of these:
//!
//! 1. **URL**: parsed the WHATWG way ([`url::Url`]), so the numeric host forms
//!    (`http://2130706433/`, `http://0177.0.0.1/`, `http://0x7f.1/`,
//!    `http://127.1/`) become the address they denote before any check. Only
//!    `http` and `https`; user info (`user:pass@`) is refused, never sent.
//! 2. **Allow-lists**: the host must match the [`Policy`]'s [`HostList`] and
//!    every list added with [`Policy::also_within`] (an operator narrowing an
//!    agent's list). Lists match whole labels — `example.com` covers
//!    `news.example.com`, never `notexample.com` — and have no globs.
//! 3. **Address guard**: an IP-literal host, and every address a host name
//!    resolves to, must be public ([`check_address`]): loopback, private,
//!    link-local (including the 169.254.169.254 cloud metadata endpoint),
//!    CGNAT, documentation, multicast, reserved and IPv4-embedding IPv6 forms
//!    are refused. If any one address of a name is refused, the whole name is.
//!    Only addresses an operator listed with
//!    [`GuardedClientBuilder::allow_private`], and the addresses of a host
//!    the operator named with [`GuardedClientBuilder::allow_private_host`]
//!    (a model server on `localhost`), are exempt: for a self-hosted search
//!    backend or model server, never for the fetch tool, and never
//!    link-local ones.
//! 4. **Connect what was checked**: the HTTP stack resolves names through the
//!    guard itself (a `reqwest` DNS resolver wrapping the [`Resolver`]), so
//!    the addresses checked are exactly the addresses connected to. A name
//!    that answers a public address first and a private one at connect time
//!    (DNS rebinding) is refused at connect time. Any [`Resolver`] may be
//!    plugged in: the guard checks whatever it returns.
//!
//! A policy may also pin every hop to exact origins
//! ([`Policy::within_origins`]): a model provider reaches only its base URL's
//! scheme, host and port.
//!
//! The client never uses a proxy, never keeps cookies, sends `GET` (or, for
//! [`Request::post_json`], a `POST` with a JSON body) with `User-Agent:`
//! [`USER_AGENT`], and drops caller headers that it controls or that carry
//! credentials (`Authorization`, `Cookie`, `Host`, `Proxy-*`,
//! `X-Forwarded-*`, hop-by-hop headers); operator headers that are not
//! secrets go in the policy ([`Policy::header`]). A `POST` follows only 307
//! and 308 redirects, which keep its method and body. Credentials reach a server only as a
//! [`SecretHeader`] the operator put in the policy: the client adds it to
//! requests for its exact [`Origin`]s (by default `https://<entry>:443` for
//! each of the policy's host entries), its value cannot be read back, `Debug`
//! redacts it, and it is scrubbed from responses that echo it, literally or
//! in a common encoding (percent, JSON, JavaScript and HTML escapes, hex,
//! base64 and base32, UTF-16, case, separators), and any run of 12 or more
//! of its letters and digits ([`Redactor`], which other crates use to scrub
//! their own secrets the same way). The client asks for `Accept-Encoding: identity` and refuses
//! any other content coding ([`EgressError::UnrequestedEncoding`]), so the
//! scrubber sees what the caller gets. Bodies are capped
//! ([`Policy::max_body`], then `truncated` is set), each request has a time
//! limit, and redirects are limited. A body can also be read as it arrives
//! ([`GuardedClient::stream`], for server-sent events): it is scrubbed piece
//! by piece ([`StreamingResponse::chunk`]), has a byte cap past which reading
//! fails, a limit on each wait and one for the whole request.
//!
//! Each hop logs one `info` line on target `nexo::egress` with the host and
//! the verdict; logs carry scheme, host and path only, since query strings
//! can hold secrets.
//!
//! Programs that are not nexo's own (a confined command's `curl` or `git`)
//! reach the network through the [`EgressProxy`] instead: a Unix socket
//! speaking HTTP proxying, which puts each connection through the same
//! address guard, a grant of `HOST[:PORT]`s ([`NetHosts`]) and the run's
//! [`Meter`], and reports it ([`ConnectionLog`]). It forwards bytes, so
//! secret injection and scrubbing, which need to read the request and the
//! answer, stay with the client; a TLS tunnel's name inside the handshake
//! is the command's to choose (the host it connects to is the one checked).
//!
//! ```no_run
//! # async fn demo() -> Result<(), nexo_egress::EgressError> {
//! use nexo_egress::{GuardedClient, HostList, Policy};
//!
//! let client = GuardedClient::new()?;
//! let hosts = HostList::new(["example.com"]).map_err(|e| nexo_egress::EgressError::Config(e.to_string()))?;
//! let response = client.get("https://news.example.com/", &[], &Policy::new(hosts)).await?;
//! println!("{} {} bytes", response.status, response.body.len());
//! # Ok(())
//! # }
//! ```

pub mod address;
pub mod allow;
mod builder;
pub mod client;
mod connect;
mod error;
mod follow;
mod headers;
pub mod meter;
pub mod net;
pub mod origin;
mod policy;
pub mod proxy;
mod request;
pub mod resolver;
mod response;
mod scrub;
mod secret;
pub mod share;
mod shown;
mod sni;
#[cfg(target_os = "linux")]
mod splice;
mod trace;

pub use address::{NonPublic, check_address};
pub use allow::{BadHost, HostList, QUOTED_CHARS};
pub use builder::GuardedClientBuilder;
pub use client::GuardedClient;
pub use error::EgressError;
pub use headers::MCP_HEADERS;
pub use meter::Meter;
pub use net::NetHosts;
pub use origin::Origin;
pub use policy::Policy;
pub use proxy::{Connection, ConnectionLog, EgressProxy, ProxyPolicy};
pub use request::{Request, USER_AGENT};
pub use resolver::{Resolver, SystemResolver};
pub use response::{Response, StreamingResponse};
pub use scrub::Redactor;
pub use secret::SecretHeader;
pub use share::ConnectionShare;
pub use trace::{TRACE_HEADERS, trace_headers};
