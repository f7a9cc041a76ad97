//! The bottom of the codec: checked big-endian reads, below every message type.

use bytes::Bytes;

/// Checked big-endian reads over a `Bytes`: every read of network input goes through it.
#[derive(Debug, Clone)]
pub(crate) struct Reader {
    buf: Bytes,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Self {
        Self { buf }
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.first()?;
        self.buf = self.buf.slice(1..);
        Some(b)
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        let b = self.take(4)?;
        let mut a = [0u8; 4];
        a.copy_from_slice(b.get(..4)?);
        Some(u32::from_be_bytes(a))
    }
    pub(crate) fn take(&mut self, n: usize) -> Option<Bytes> {
        if n > self.buf.len() {
            return None;
        }
        Some(self.buf.split_to(n))
    }
    pub(crate) fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.buf)
    }
}
