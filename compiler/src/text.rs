//! Text helpers shared by the printers (the fusion and kernel-IR dumps, the CUDA back end), at
//! the bottom of the crate's layering so that every printer may use them.

/// Appends the decimal text of `i` (as `{i}` writes it) without the formatting machinery:
/// indices are most of what the dumps and the CUDA hold.
pub(crate) fn write_int(i: i64, out: &mut String) {
    let mut digits = [0u8; 20];
    let mut n = i.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if i < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}
