//! A stderr sink that never fails: it keeps the last `cap` bytes and drops the rest, so a
//! chatty module is neither killed nor allowed to use unbounded host memory.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Keeps the tail of everything written to it.
#[derive(Clone)]
pub struct TailPipe {
    cap: usize,
    buf: Arc<Mutex<Vec<u8>>>,
}

impl TailPipe {
    /// A pipe keeping at most `cap` bytes.
    pub fn new(cap: usize) -> TailPipe {
        TailPipe {
            cap,
            buf: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// What was kept.
    pub fn contents(&self) -> Vec<u8> {
        crate::locked(&self.buf).clone()
    }

    fn push(&self, bytes: &[u8]) {
        {
            let mut buf = crate::locked(&self.buf);
            buf.extend_from_slice(bytes);
            if buf.len() > self.cap {
                let excess = buf.len() - self.cap;
                buf.drain(..excess);
            }
        }
    }
}

impl IsTerminal for TailPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for TailPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl Pollable for TailPipe {
    async fn ready(&mut self) {}
}

impl OutputStream for TailPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for TailPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
