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

/// The text of a float literal: the shortest decimal that reads back to the same value
/// (`{}`, positional), with a `.0` where that has no fraction, so that CUDA and Python read a
/// floating-point literal. (Not `{:?}`, which writes the same digits but switches to exponent
/// form far from 1: `Debug`'s float formatter is the only user of its code in the playground's
/// wasm, which counts against the page's download budget.)
pub(crate) fn float_literal(v: impl std::fmt::Display) -> String {
    let mut s = v.to_string();
    // Whole numbers only: not `NaN` or `inf` (the IR dump's literals may be those).
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        s.push_str(".0");
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn float_literals_read_back_as_the_same_float() {
        use super::float_literal;
        assert_eq!(float_literal(1.0f32), "1.0");
        assert_eq!(float_literal(-2.0f64), "-2.0");
        assert_eq!(float_literal(0.044715f32), "0.044715");
        assert_eq!(float_literal(0.7978845608028654f64), "0.7978845608028654");
        assert_eq!(float_literal(1e-7f64), "0.0000001");
        assert_eq!(float_literal(1e20f32), "100000000000000000000.0");
        assert_eq!(float_literal(f64::NAN), "NaN");
        assert_eq!(float_literal(f64::NEG_INFINITY), "-inf");
        for v in [
            0.1f64,
            1.0 / 3.0,
            6.02e23,
            1.5e-300,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            assert_eq!(float_literal(v).parse::<f64>().unwrap(), v);
        }
        for v in [0.1f32, 1.0 / 3.0, 3.4e38, 1e-45] {
            assert_eq!(float_literal(v).parse::<f32>().unwrap(), v);
        }
    }
}
