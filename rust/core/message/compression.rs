//! Body compression as RocketMQ's producers apply it (FORMAT.md §1.6): SYSFLAG bit 0 marks a
//! compressed body and bits 8–10 name the codec (1 LZ4 frame, 2 Zstandard frame, 3 zlib stream;
//! 0 is zlib too, as written before the codec bits existed).
//!
//! Invariants
//! - The store never looks inside a body. The stored bytes are the compressed ones, so BODYCRC,
//!   BODYLEN, the whole-record CRC and the size limits all apply to them; a producer compresses
//!   before the append and a reader decompresses after the read.
//! - Decompression stops at [`MAX_DECOMPRESSED`] bytes: a body that would expand further is an
//!   error, so a small record cannot make a reader allocate without bound.
//! - Errors are [`Error::Compression`]: a body that does not decompress is reported, never
//!   returned as if it were the message.

use std::borrow::Cow;
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::thread::LocalKey;

use super::sysflag;
use crate::error::{Error, Result};

/// SYSFLAG bits naming the codec of a compressed body.
pub const TYPE_MASK: i32 = 0x700;
/// Codec bits of an LZ4 frame.
pub const TYPE_LZ4: i32 = 0x100;
/// Codec bits of a Zstandard frame.
pub const TYPE_ZSTD: i32 = 0x200;
/// Codec bits of a zlib stream.
pub const TYPE_ZLIB: i32 = 0x300;

/// Largest body a stored body may decompress to: 128 MiB, 32 times the default message limit.
pub const MAX_DECOMPRESSED: usize = 128 << 20;

/// RocketMQ's default compression level (`rocketmq.message.compressLevel`).
pub const DEFAULT_LEVEL: i32 = 5;

/// A body codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// LZ4 frame format (RocketMQ's `Lz4Compressor`); the level is not used.
    Lz4,
    /// Zstandard frame (RocketMQ's `ZstdCompressor`), levels 1 to 22.
    Zstd,
    /// zlib stream, RFC 1950 (RocketMQ's `ZlibCompressor`, the Java producer's default),
    /// levels 0 to 9.
    Zlib,
}

impl Codec {
    /// The codec called `name` (`lz4`, `zstd` or `zlib`, any case).
    pub fn from_name(name: &str) -> Option<Codec> {
        match name.to_ascii_lowercase().as_str() {
            "lz4" => Some(Codec::Lz4),
            "zstd" => Some(Codec::Zstd),
            "zlib" => Some(Codec::Zlib),
            _ => None,
        }
    }

    /// The codec's name, as [`Codec::from_name`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
            Codec::Zlib => "zlib",
        }
    }

    /// The SYSFLAG bits of a body compressed with this codec.
    pub fn sysflag(self) -> i32 {
        sysflag::COMPRESSED
            | match self {
                Codec::Lz4 => TYPE_LZ4,
                Codec::Zstd => TYPE_ZSTD,
                Codec::Zlib => TYPE_ZLIB,
            }
    }

    /// The codec of a stored body: `None` when SYSFLAG does not mark it compressed, an error
    /// for codec bits no codec has (4 to 7).
    pub fn of_sysflag(flags: i32) -> Result<Option<Codec>> {
        if flags & sysflag::COMPRESSED == 0 {
            return Ok(None);
        }
        match flags & TYPE_MASK {
            TYPE_LZ4 => Ok(Some(Codec::Lz4)),
            TYPE_ZSTD => Ok(Some(Codec::Zstd)),
            0 | TYPE_ZLIB => Ok(Some(Codec::Zlib)),
            other => Err(Error::Compression {
                codec: "unknown",
                reason: format!("sysflag names compression type {}", other >> 8),
            }),
        }
    }

    /// Checks `level` for this codec (LZ4 takes any: it has none).
    pub fn check_level(self, level: i32) -> Result<()> {
        let ok = match self {
            Codec::Lz4 => true,
            Codec::Zstd => (1..=22).contains(&level),
            Codec::Zlib => (0..=9).contains(&level),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidConfig {
                field: "compression_level",
                reason: format!(
                    "{level} is not a {} level ({})",
                    self.name(),
                    match self {
                        Codec::Zstd => "1 to 22",
                        _ => "0 to 9",
                    }
                ),
            })
        }
    }

    /// `body` compressed at `level` (checked with [`Codec::check_level`] first).
    pub fn compress(self, body: &[u8], level: i32) -> Result<Vec<u8>> {
        self.check_level(level)?;
        let written = match self {
            Codec::Zlib => zlib_compress(body, level),
            Codec::Lz4 => {
                let out = Vec::with_capacity(body.len() / 2 + 64);
                let mut e = lz4_flex::frame::FrameEncoder::new(out);
                e.write_all(body)
                    .and_then(|()| e.finish().map_err(io::Error::from))
            }
            Codec::Zstd => cached(
                &ZSTD_COMPRESS,
                || Ok((level, zstd::bulk::Compressor::new(level)?)),
                |(l, _)| *l == level,
                |(_, c)| c.compress(body),
            ),
        };
        written.map_err(|e| self.error(e))
    }

    /// The body `stored` decompresses to, at most [`MAX_DECOMPRESSED`] bytes.
    pub fn decompress(self, stored: &[u8]) -> Result<Vec<u8>> {
        let read = match self {
            Codec::Zlib => zlib_decompress(stored),
            Codec::Lz4 => {
                let mut out = Vec::with_capacity(first_capacity(stored));
                lz4_flex::frame::FrameDecoder::new(stored)
                    .take(MAX_DECOMPRESSED as u64 + 1)
                    .read_to_end(&mut out)
                    .map(|_| out)
            }
            Codec::Zstd => zstd_decompress(stored),
        };
        let out = read.map_err(|e| self.error(e))?;
        if out.len() > MAX_DECOMPRESSED {
            return Err(self.error(too_large()));
        }
        Ok(out)
    }

    fn error(self, e: io::Error) -> Error {
        Error::Compression {
            codec: self.name(),
            reason: e.to_string(),
        }
    }
}

thread_local! {
    // Codec state kept per thread between bodies: a Zstandard context allocates and faults in
    // megabytes of tables (and, decompressing a stream without a content size, its window) when
    // created, and a zlib one a few hundred KiB. Each use starts with a reset.
    static ZLIB_DEFLATE: RefCell<Option<(i32, flate2::Compress)>> = const { RefCell::new(None) };
    static ZLIB_INFLATE: RefCell<Option<flate2::Decompress>> = const { RefCell::new(None) };
    static ZSTD_COMPRESS: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static ZSTD_DECOMPRESS: RefCell<Option<zstd::stream::raw::Decoder<'static>>> =
        const { RefCell::new(None) };
}

/// Runs `f` on this thread's cached state of `key`, made anew by `make` when there is none or
/// it does not `fit` (another level). A fresh state serves a nested use.
fn cached<T: 'static, R>(
    key: &'static LocalKey<RefCell<Option<T>>>,
    make: impl FnOnce() -> io::Result<T>,
    fits: impl Fn(&T) -> bool,
    f: impl FnOnce(&mut T) -> io::Result<R>,
) -> io::Result<R> {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            let state = match slot.take() {
                Some(t) if fits(&t) => slot.insert(t),
                _ => slot.insert(make()?),
            };
            f(state)
        }
        Err(_) => f(&mut make()?),
    })
}

fn too_large() -> io::Error {
    io::Error::other(format!(
        "the body decompresses to more than {MAX_DECOMPRESSED} bytes"
    ))
}

fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the compressed stream ends before its end",
    )
}

fn first_capacity(stored: &[u8]) -> usize {
    stored.len().saturating_mul(4).clamp(256, MAX_DECOMPRESSED)
}

/// Room for more output, never past one byte over the limit (which is how exceeding it shows).
fn grow(out: &mut Vec<u8>) -> io::Result<()> {
    if out.len() > MAX_DECOMPRESSED {
        return Err(too_large());
    }
    let room = (MAX_DECOMPRESSED + 1 - out.len()).min(out.capacity().max(4096));
    out.reserve_exact(room);
    Ok(())
}

fn zlib_compress(body: &[u8], level: i32) -> io::Result<Vec<u8>> {
    let make = || {
        let l = flate2::Compression::new(level.unsigned_abs());
        Ok((level, flate2::Compress::new(l, true)))
    };
    cached(
        &ZLIB_DEFLATE,
        make,
        |(l, _)| *l == level,
        |(_, c)| {
            c.reset();
            let mut out = Vec::with_capacity(body.len() / 2 + 64);
            loop {
                let (in0, out0) = (c.total_in(), c.total_out());
                let rest = body.get(in0 as usize..).unwrap_or(&[]);
                let status = c
                    .compress_vec(rest, &mut out, flate2::FlushCompress::Finish)
                    .map_err(io::Error::other)?;
                if status == flate2::Status::StreamEnd {
                    return Ok(out);
                }
                if out.len() == out.capacity() {
                    out.reserve(out.capacity().max(256));
                } else if c.total_in() == in0 && c.total_out() == out0 {
                    return Err(io::Error::other("deflate made no progress"));
                }
            }
        },
    )
}

fn zlib_decompress(stored: &[u8]) -> io::Result<Vec<u8>> {
    let make = || Ok(flate2::Decompress::new(true));
    cached(
        &ZLIB_INFLATE,
        make,
        |_| true,
        |d| {
            d.reset(true);
            let mut out = Vec::with_capacity(first_capacity(stored));
            loop {
                if out.len() == out.capacity() {
                    grow(&mut out)?;
                }
                let (in0, out0) = (d.total_in(), d.total_out());
                let rest = stored.get(in0 as usize..).unwrap_or(&[]);
                let status = d
                    .decompress_vec(rest, &mut out, flate2::FlushDecompress::None)
                    .map_err(io::Error::other)?;
                if status == flate2::Status::StreamEnd {
                    return Ok(out);
                }
                if out.len() < out.capacity() && d.total_in() == in0 && d.total_out() == out0 {
                    return Err(truncated());
                }
            }
        },
    )
}

fn zstd_decompress(stored: &[u8]) -> io::Result<Vec<u8>> {
    use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
    cached(
        &ZSTD_DECOMPRESS,
        zstd::stream::raw::Decoder::new,
        |_| true,
        |d| {
            d.reinit()?;
            let mut input = InBuffer::around(stored);
            let mut out = Vec::with_capacity(first_capacity(stored));
            loop {
                if out.len() == out.capacity() {
                    grow(&mut out)?;
                }
                let (in0, out0) = (input.pos(), out.len());
                let left = d.run(&mut input, &mut OutBuffer::around_pos(&mut out, out0))?;
                // 0: a frame is decoded and flushed; more input is another frame
                if left == 0 && input.pos() == stored.len() {
                    return Ok(out);
                }
                if out.len() < out.capacity() && input.pos() == in0 && out.len() == out0 {
                    return Err(truncated());
                }
            }
        },
    )
}

/// The body a producer sent: `stored` itself, or decompressed when `flags` (the record's
/// SYSFLAG) mark it compressed.
pub fn decoded_body(flags: i32, stored: &[u8]) -> Result<Cow<'_, [u8]>> {
    match Codec::of_sysflag(flags)? {
        None => Ok(Cow::Borrowed(stored)),
        Some(codec) => codec.decompress(stored).map(Cow::Owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        let line = b"{\"event\":\"page_view\",\"user\":12345,\"path\":\"/products/42\"}\n";
        line.iter().copied().cycle().take(n).collect()
    }

    #[test]
    fn each_codec_round_trips_and_shrinks_repetitive_bodies() {
        for codec in [Codec::Lz4, Codec::Zstd, Codec::Zlib] {
            for n in [1, 100, 4096, 200_000] {
                let body = text(n);
                let packed = codec.compress(&body, DEFAULT_LEVEL).unwrap();
                if n >= 4096 {
                    assert!(
                        packed.len() * 4 < body.len(),
                        "{codec:?} {n}: {}",
                        packed.len()
                    );
                }
                assert_eq!(codec.decompress(&packed).unwrap(), body, "{codec:?} {n}");
                let flags = codec.sysflag();
                assert_eq!(Codec::of_sysflag(flags).unwrap(), Some(codec));
                assert_eq!(decoded_body(flags, &packed).unwrap().as_ref(), &body[..]);
            }
        }
    }

    #[test]
    fn sysflag_bits_are_rocketmqs() {
        assert_eq!(Codec::Lz4.sysflag(), 0x101);
        assert_eq!(Codec::Zstd.sysflag(), 0x201);
        assert_eq!(Codec::Zlib.sysflag(), 0x301);
        // compressed with no codec bits: zlib, as before RocketMQ had codec bits
        assert_eq!(Codec::of_sysflag(0x1).unwrap(), Some(Codec::Zlib));
        // codec bits without the compressed bit mean nothing
        assert_eq!(Codec::of_sysflag(0x300).unwrap(), None);
        // other sysflag bits do not disturb the codec
        assert_eq!(
            Codec::of_sysflag(0x201 | 0x8 | 0x30).unwrap(),
            Some(Codec::Zstd)
        );
        for unknown in [0x401, 0x501, 0x601, 0x701] {
            let e = Codec::of_sysflag(unknown).unwrap_err();
            assert_eq!(e.kind(), "COMPRESSION", "{unknown:#x}");
        }
        assert_eq!(decoded_body(0, b"plain").unwrap().as_ref(), b"plain");
    }

    #[test]
    fn damaged_and_truncated_bodies_are_errors_not_messages() {
        let body = text(10_000);
        for codec in [Codec::Lz4, Codec::Zstd, Codec::Zlib] {
            let packed = codec.compress(&body, DEFAULT_LEVEL).unwrap();
            let truncated = &packed[..packed.len() / 2];
            let e = codec.decompress(truncated).unwrap_err();
            assert_eq!(e.kind(), "COMPRESSION", "{codec:?} truncated");
            assert!(e.to_string().starts_with(codec.name()), "{e}");
            let garbage = b"definitely not a compressed stream";
            assert!(codec.decompress(garbage).is_err(), "{codec:?} garbage");
        }
    }

    #[test]
    fn a_body_expanding_past_the_limit_is_refused() {
        let zeros = vec![0u8; MAX_DECOMPRESSED + 1];
        for codec in [Codec::Zstd, Codec::Zlib] {
            let packed = codec.compress(&zeros, 1).unwrap();
            assert!(packed.len() < 2 << 20, "{codec:?} {}", packed.len());
            let e = codec.decompress(&packed).unwrap_err();
            assert!(e.to_string().contains("more than"), "{e}");
        }
        let exact = vec![0u8; MAX_DECOMPRESSED];
        let packed = Codec::Zstd.compress(&exact, 1).unwrap();
        assert_eq!(
            Codec::Zstd.decompress(&packed).unwrap().len(),
            MAX_DECOMPRESSED
        );
    }

    #[test]
    fn streams_without_a_content_size_and_concatenated_frames_decode() {
        // Java's ZstdOutputStream and DeflaterOutputStream write streams, not one-shot frames.
        let body = text(300_000);
        let streamed = zstd::stream::encode_all(&body[..], 5).unwrap();
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&streamed).unwrap(),
            None
        );
        assert_eq!(Codec::Zstd.decompress(&streamed).unwrap(), body);
        let mut two = Codec::Zstd.compress(&body[..1000], 3).unwrap();
        two.extend(Codec::Zstd.compress(&body[1000..], 3).unwrap());
        assert_eq!(Codec::Zstd.decompress(&two).unwrap(), body);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(5));
        for chunk in body.chunks(512) {
            z.write_all(chunk).unwrap();
        }
        assert_eq!(Codec::Zlib.decompress(&z.finish().unwrap()).unwrap(), body);
    }

    #[test]
    fn the_state_kept_per_thread_is_reset_between_bodies() {
        let a = text(50_000);
        let b: Vec<u8> = text(70_000).iter().map(|x| x ^ 0x20).collect();
        for codec in [Codec::Zstd, Codec::Zlib] {
            let pa = codec.compress(&a, 3).unwrap();
            let pb = codec.compress(&b, 9).unwrap();
            // level 9 replaced the cached state: back at level 3 the bytes are the same as before
            assert_eq!(codec.compress(&a, 3).unwrap(), pa, "{codec:?}");
            assert!(codec.decompress(&pa[..pa.len() / 3]).is_err(), "{codec:?}");
            assert!(
                codec.decompress(b"garbage in the middle").is_err(),
                "{codec:?}"
            );
            assert_eq!(codec.decompress(&pb).unwrap(), b, "{codec:?}");
            assert_eq!(codec.decompress(&pa).unwrap(), a, "{codec:?}");
        }
    }

    #[test]
    fn levels_are_checked_per_codec() {
        assert!(Codec::Zlib.check_level(9).is_ok());
        assert!(Codec::Zlib.check_level(0).is_ok());
        assert_eq!(
            Codec::Zlib.check_level(10).unwrap_err().kind(),
            "INVALID_CONFIG"
        );
        assert_eq!(
            Codec::Zlib.check_level(-1).unwrap_err().kind(),
            "INVALID_CONFIG"
        );
        assert!(Codec::Zstd.check_level(22).is_ok());
        assert_eq!(
            Codec::Zstd.check_level(0).unwrap_err().kind(),
            "INVALID_CONFIG"
        );
        assert!(Codec::Lz4.check_level(-7).is_ok());
        assert_eq!(Codec::from_name("ZSTD"), Some(Codec::Zstd));
        assert_eq!(Codec::from_name("snappy"), None);
    }
}
