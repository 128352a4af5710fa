//! Small helpers shared by every layer: the file-system durability protocol, CRC, the clock,
//! non-blocking lock attempts, the primitives the lock-free protocols are model-checked with.

pub mod bytes;
pub mod clock;
pub mod crc;
pub mod fs;
pub mod hash;
pub mod loom_sync;
pub mod reuse;
pub mod sync;
