//! The server name a TLS client asks for in its ClientHello (SNI), read
//! from the first bytes a client sends through a tunnel: a tunnel granted
//! for one host must not carry a handshake for another served at the same
//! address (a CDN routes by it).

/// What the first bytes of a tunnel say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hello {
    /// Not all of the ClientHello has arrived yet.
    Incomplete,
    /// Not a TLS handshake: some other protocol.
    NotTls,
    /// A ClientHello, with the server name it asks for, if any.
    Tls(Option<String>),
    /// A TLS record that is not a well-formed ClientHello, or one that
    /// names its server twice (a router could read the other name).
    Malformed,
    /// A ClientHello that hides its real server name (Encrypted Client
    /// Hello): the name outside need not be the one a CDN routes by.
    Encrypted,
}

/// The server name extension.
const SERVER_NAME: u16 = 0;
/// The Encrypted Client Hello extension.
const ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;

/// The longest ClientHello read: one TLS record's most.
pub(crate) const MAX_HELLO: usize = 5 + (1 << 14);

/// Reads `bytes`, the start of what a client sent.
pub(crate) fn client_hello(bytes: &[u8]) -> Hello {
    let Some(&first) = bytes.first() else { return Hello::Incomplete };
    // A handshake record: content type 22.
    if first != 0x16 {
        return Hello::NotTls;
    }
    if bytes.len() < 5 {
        return Hello::Incomplete;
    }
    let record = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
    if bytes.len() < 5 + record {
        return Hello::Incomplete;
    }
    let mut r = Reader(&bytes[5..5 + record]);
    // A ClientHello (handshake type 1) within this one record.
    let parsed = (|| {
        if r.u8()? != 1 {
            return None;
        }
        let length = r.u24()?;
        let mut hello = Reader(r.take(length)?);
        hello.take(2 + 32)?; // version, random
        let session = usize::from(hello.u8()?);
        hello.take(session)?;
        let suites = usize::from(hello.u16()?);
        hello.take(suites)?;
        let compression = usize::from(hello.u8()?);
        hello.take(compression)?;
        if hello.0.is_empty() {
            return Some((None, false));
        }
        let extensions = usize::from(hello.u16()?);
        let mut extensions = Reader(hello.take(extensions)?);
        let mut kinds = Vec::new();
        let mut name = None;
        while !extensions.0.is_empty() {
            let kind = extensions.u16()?;
            let length = usize::from(extensions.u16()?);
            let mut data = Reader(extensions.take(length)?);
            // Each extension once, as TLS requires.
            if kinds.contains(&kind) {
                return None;
            }
            kinds.push(kind);
            if kind != SERVER_NAME {
                continue;
            }
            let list = usize::from(data.u16()?);
            let mut list = Reader(data.take(list)?);
            while !list.0.is_empty() {
                let name_type = list.u8()?;
                let length = usize::from(list.u16()?);
                let entry = list.take(length)?;
                // One name of each type, as TLS requires.
                if name_type == 0 && name.replace(String::from_utf8(entry.to_vec()).ok()?).is_some() {
                    return None;
                }
            }
        }
        Some((name, kinds.contains(&ENCRYPTED_CLIENT_HELLO)))
    })();
    match parsed {
        None => Hello::Malformed,
        Some((_, true)) => Hello::Encrypted,
        Some((name, false)) => Hello::Tls(name),
    }
}

/// Reads big-endian fields off a slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3).map(|b| usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Whole ClientHellos are read in the proxy's tests (tests/proxy.rs).
    #[test]
    fn what_is_not_a_client_hello_is_told_apart() {
        assert_eq!(client_hello(b""), Hello::Incomplete);
        assert_eq!(client_hello(&[0x16, 0x03]), Hello::Incomplete);
        assert_eq!(client_hello(&[0x16, 0x03, 0x01, 0x00, 0x08, 1, 0]), Hello::Incomplete);
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(client_hello(b"SSH-2.0-OpenSSH_9.6\r\n"), Hello::NotTls);
        // A ServerHello, and a ClientHello longer than its record.
        assert_eq!(client_hello(&[0x16, 0x03, 0x01, 0x00, 0x04, 2, 0, 0, 0]), Hello::Malformed);
        assert_eq!(client_hello(&[0x16, 0x03, 0x01, 0x00, 0x04, 1, 0, 0, 9]), Hello::Malformed);
    }
}
