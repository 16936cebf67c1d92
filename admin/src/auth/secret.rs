//! Random secrets (personal API tokens, session ids, CSRF tokens) and their stored digests.
//! A secret is 256 random bits, so its SHA-256 is enough to find it and reveals nothing.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// What every personal API token starts with, so a leaked one is recognisable (secret scanners).
pub const TOKEN_PREFIX: &str = "cdz_";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 256 random bits as 64 hex characters.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex(&bytes)
}

/// A new personal API token: `cdz_` and 64 hex characters.
pub fn new_token() -> String {
    format!("{TOKEN_PREFIX}{}", random_hex())
}

/// The stored digest of a secret.
pub fn digest(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// The part of a token shown in lists (`cdz_1a2b3c4d`).
pub fn shown_prefix(token: &str) -> String {
    token.chars().take(TOKEN_PREFIX.len() + 8).collect()
}

/// Compares in time independent of where the strings differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_prefixed_and_digested() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert!(a.starts_with("cdz_") && a.len() == 68, "{a}");
        assert_eq!(digest(&a).len(), 32);
        assert_eq!(digest(&a), digest(&a));
        assert_eq!(shown_prefix(&a).len(), 12);
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
    }
}
