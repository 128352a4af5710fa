//! Small helpers shared by every layer: the file-system durability protocol, the two-copy
//! layout of metadata files, CRC, the clock, non-blocking lock attempts, kill points for crash
//! tests, the primitives the lock-free protocols are model-checked with.

pub mod bytes;
pub mod clock;
pub mod crc;
pub mod fs;
pub mod hash;
pub mod kill_point;
pub mod loom_sync;
pub mod reuse;
pub mod sync;
pub mod two_copies;
