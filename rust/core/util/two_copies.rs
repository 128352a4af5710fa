//! The layout the small metadata files share (the checkpoint, FORMAT.md §5; `meta`, §11): a
//! 4096-byte file holding two copies of one slot, A at byte 0 and B at byte 2048, so that B
//! survives a torn write or a bad sector in A. Each file's module owns its slot's encoding and
//! how the copies are written; this is where the copies are and how a reader picks one.

/// Length of the file.
pub const FILE_LEN: usize = 4096;
/// Where copy B starts (copy A starts at 0 and must end before it).
pub const SLOT_B_AT: usize = 2048;

/// The first copy in `file` (its bytes as read, possibly short) that `decode` accepts, A
/// first; `decode` sees the bytes from the copy's start (A's end at B).
pub fn read<T>(file: &[u8], decode: impl Fn(&[u8]) -> Option<T>) -> Option<T> {
    read_at(file, decode).map(|(_, t)| t)
}

/// `read`, with where the copy taken starts (0 or `SLOT_B_AT`), for a reader that checks more
/// of the copy's bytes than `decode` does.
pub fn read_at<T>(file: &[u8], decode: impl Fn(&[u8]) -> Option<T>) -> Option<(usize, T)> {
    let a = file.get(..file.len().min(SLOT_B_AT)).unwrap_or(&[]);
    decode(a).map(|t| (0, t)).or_else(|| {
        file.get(SLOT_B_AT..)
            .and_then(&decode)
            .map(|t| (SLOT_B_AT, t))
    })
}

/// A whole file holding `slot` as both copies, zeros elsewhere (`slot` is at most
/// `SLOT_B_AT` bytes; a longer one is cut there).
pub fn image(slot: &[u8]) -> Vec<u8> {
    let slot = slot.get(..slot.len().min(SLOT_B_AT)).unwrap_or(slot);
    let mut file = vec![0u8; FILE_LEN];
    for at in [0, SLOT_B_AT] {
        if let Some(copy) = file.get_mut(at..at + slot.len()) {
            copy.copy_from_slice(slot);
        }
    }
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_takes_a_then_b() {
        let decode = |b: &[u8]| (b.first() == Some(&7)).then_some(b.len());
        let mut file = image(&[7, 1, 2]);
        assert_eq!(file.len(), FILE_LEN);
        assert_eq!(read(&file, decode), Some(SLOT_B_AT));
        file[0] = 0;
        assert_eq!(read(&file, decode), Some(FILE_LEN - SLOT_B_AT));
        file[SLOT_B_AT] = 0;
        assert_eq!(read(&file, decode), None);
        // A short file (a torn first write): what is there is read.
        assert_eq!(read(&[7], decode), Some(1));
        assert_eq!(read(&[], decode), None);
    }
}
