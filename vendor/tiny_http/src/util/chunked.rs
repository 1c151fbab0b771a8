//! (trigd patch) The reader of a chunked request body (RFC 9112 §7.1),
//! strict and bounded, in place of `chunked_transfer::Decoder`, which
//! gathered a chunk-size line into a buffer until a CR came (65 KB a read,
//! for as long as the request's deadline let it: 1.9 GB from one
//! connection), took `+5`, ` 5 ` and a bare LF in an extension, refused
//! trailers, and ended a body cut short as if it were whole.
//!
//! A size line is `1*HEXDIG [ ";" extension ] CRLF`, at most
//! [`MAX_LINE`] bytes; trailer lines after the last chunk are read and
//! dropped, at most [`MAX_TRAILERS`] bytes together. Any other byte, a
//! bare LF, a size past `usize`, or the end of the stream before the
//! last chunk is an error (`InvalidData`, or `UnexpectedEof`): the body
//! is then not done, and the connection closes after the answer.

use std::io::{self, ErrorKind, Read};

/// The longest chunk-size line, extension included.
pub const MAX_LINE: usize = 4096;

/// The most bytes of trailer lines after the last chunk.
pub const MAX_TRAILERS: usize = 8192;

/// Where the reader is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk, with this many bytes left.
    Data(usize),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk and its trailers.
    Done,
}

/// A chunked body read from `inner`.
pub struct ChunkedReader<R> {
    inner: R,
    at: At,
}

impl<R: Read> ChunkedReader<R> {
    /// The body that starts at `inner`'s next byte.
    pub fn new(inner: R) -> ChunkedReader<R> {
        ChunkedReader {
            inner,
            at: At::Size,
        }
    }

    /// The next byte; the stream's end before the body's is an error.
    fn byte(&mut self) -> io::Result<u8> {
        let mut b = [0u8; 1];
        loop {
            match self.inner.read(&mut b) {
                Ok(0) => return Err(cut_short()),
                Ok(_) => return Ok(b[0]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// A CR LF; anything else is an error.
    fn crlf(&mut self) -> io::Result<()> {
        match (self.byte()?, self.byte()?) {
            (b'\r', b'\n') => Ok(()),
            _ => Err(malformed("a chunk's data does not end with CRLF")),
        }
    }

    /// A chunk-size line: the size.
    fn size_line(&mut self) -> io::Result<usize> {
        let mut size: usize = 0;
        let mut digits = 0;
        let mut len = 0;
        let mut b = self.byte()?;
        while let Some(d) = (b as char).to_digit(16) {
            size = size
                .checked_mul(16)
                .and_then(|s| s.checked_add(d as usize))
                .ok_or_else(|| malformed("a chunk size is too large"))?;
            digits += 1;
            len += 1;
            if len > MAX_LINE {
                return Err(malformed("a chunk-size line is too long"));
            }
            b = self.byte()?;
        }
        if digits == 0 {
            return Err(malformed("a chunk size is not hexadecimal digits"));
        }
        if b == b';' {
            // An extension: any visible byte, space or tab, up to the CR.
            loop {
                b = self.byte()?;
                len += 1;
                if len > MAX_LINE {
                    return Err(malformed("a chunk-size line is too long"));
                }
                match b {
                    b'\r' => break,
                    b'\t' | b' '..=b'~' | 0x80..=0xff => {}
                    _ => return Err(malformed("a chunk extension holds a control byte")),
                }
            }
        }
        match (b, self.byte()?) {
            (b'\r', b'\n') => Ok(size),
            _ => Err(malformed("a chunk-size line does not end with CRLF")),
        }
    }

    /// The trailer lines after the last chunk, up to the empty line:
    /// read and dropped.
    fn trailers(&mut self) -> io::Result<()> {
        let mut total = 0;
        loop {
            let mut line = 0;
            loop {
                let b = self.byte()?;
                total += 1;
                if total > MAX_TRAILERS {
                    return Err(malformed("the trailers are too long"));
                }
                match b {
                    b'\r' => break,
                    0..=8 | 10..=31 => {
                        return Err(malformed("a trailer line holds a control byte"))
                    }
                    _ => line += 1,
                }
            }
            if self.byte()? != b'\n' {
                return Err(malformed("a trailer line does not end with CRLF"));
            }
            if line == 0 {
                return Ok(());
            }
        }
    }
}

impl<R: Read> Read for ChunkedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match self.at {
                At::Done => return Ok(0),
                At::Size => match self.size_line()? {
                    0 => {
                        self.trailers()?;
                        self.at = At::Done;
                    }
                    n => self.at = At::Data(n),
                },
                At::DataEnd => {
                    self.crlf()?;
                    self.at = At::Size;
                }
                At::Data(left) => {
                    let want = buf.len().min(left);
                    let got = loop {
                        match self.inner.read(&mut buf[..want]) {
                            Ok(0) => return Err(cut_short()),
                            Ok(n) => break n,
                            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                            Err(e) => return Err(e),
                        }
                    };
                    self.at = match left - got {
                        0 => At::DataEnd,
                        n => At::Data(n),
                    };
                    return Ok(got);
                }
            }
        }
    }
}

fn malformed(why: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, format!("malformed chunked body: {why}"))
}

fn cut_short() -> io::Error {
    io::Error::new(
        ErrorKind::UnexpectedEof,
        "the connection ended before the body's end",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(wire: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        ChunkedReader::new(wire).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn sound_bodies_are_read_whole_and_what_follows_is_left() {
        assert_eq!(body(b"5\r\nhello\r\n0\r\n\r\n").unwrap(), b"hello");
        assert_eq!(body(b"5;x=1\r\nhello\r\n2\r\n!!\r\n0\r\n\r\n").unwrap(), b"hello!!");
        assert_eq!(body(b"0005\r\nhello\r\n0\r\nX-T: 1\r\n\r\n").unwrap(), b"hello");
        assert_eq!(body(b"A\r\n0123456789\r\n0\r\n\r\n").unwrap(), b"0123456789");
        let wire = b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
        let mut r = ChunkedReader::new(&wire[..]);
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"abc");
        assert_eq!(r.inner, b"GET / HTTP/1.1\r\n", "the next request is left");
    }

    #[test]
    fn anything_else_is_an_error_never_a_short_body() {
        for wire in [
            &b"+5\r\nhello\r\n0\r\n\r\n"[..],
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"5 \r\nhello\r\n0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"ffffffffffffffffff\r\n",
            b"\r\n",
            b"10\r\nabc",
            b"5\r\n",
            b"5\r\nhello\r\n",
            b"0\r\nX-T: 1\n\r\n",
        ] {
            assert!(body(wire).is_err(), "{:?}", String::from_utf8_lossy(wire));
        }
        let eof = body(b"10\r\nabc").unwrap_err();
        assert_eq!(eof.kind(), ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_size_line_without_its_end_is_refused_within_its_bound() {
        let mut wire = vec![b'0'; 1 << 20];
        wire.extend_from_slice(b"\r\n");
        assert!(body(&wire).is_err(), "a million zeros");
        let mut ext = b"5;".to_vec();
        ext.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        assert!(body(&ext).is_err(), "a long extension");
        let mut trailers = b"0\r\n".to_vec();
        for _ in 0..1000 {
            trailers.extend_from_slice(b"X-T: 1234567890\r\n");
        }
        assert!(body(&trailers).is_err(), "too many trailers");
    }
}
