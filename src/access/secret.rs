//! Secrets at rest and in comparison: sha256 of keys and tokens (only
//! hashes are stored), constant-time equality, and fresh random tokens.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// sha256 of `s`.
pub fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Compare in constant time (for equal lengths), so timing says nothing
/// about where two tokens differ.
pub fn same(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// 256 random bits as 64 hex digits.
pub fn random_hex() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("a", "ab"));
        assert_eq!(random_hex().len(), 64);
        assert_ne!(random_hex(), random_hex());
    }
}
