//! A writer that takes at most a declared number of bytes: a registry that
//! streams more of a blob than its manifest declared is cut off there,
//! before it fills the disk.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// `inner`, refusing writes past `limit` bytes in all.
pub(super) struct Capped<W> {
    inner: W,
    left: u64,
    overflowed: bool,
}

impl<W> Capped<W> {
    /// `inner`, taking at most `limit` bytes.
    pub(super) fn new(inner: W, limit: u64) -> Capped<W> {
        Capped { inner, left: limit, overflowed: false }
    }

    /// The writer underneath.
    pub(super) fn into_inner(self) -> W {
        self.inner
    }

    /// Whether a write past the limit was refused.
    pub(super) fn overflowed(&self) -> bool {
        self.overflowed
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Capped<W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if u64::try_from(buf.len()).map_or(true, |n| n > self.left) {
            self.overflowed = true;
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::FileTooLarge, "more bytes than declared")));
        }
        let written = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        self.left -= u64::try_from(written).unwrap_or(u64::MAX).min(self.left);
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    #[tokio::test]
    async fn writes_up_to_the_limit_and_refuses_past_it() {
        let mut out = Capped::new(Vec::new(), 5);
        out.write_all(b"abc").await.unwrap();
        out.write_all(b"de").await.unwrap();
        assert!(!out.overflowed());
        let e = out.write_all(b"f").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert!(out.overflowed());
        assert_eq!(out.inner, b"abcde");
    }
}
