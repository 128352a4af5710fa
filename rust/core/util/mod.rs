//! Small helpers shared by every layer: the file-system durability protocol, CRC, the clock,
//! non-blocking lock attempts.

pub mod bytes;
pub mod clock;
pub mod crc;
pub mod fs;
pub mod hash;
pub mod reuse;
pub mod sync;
