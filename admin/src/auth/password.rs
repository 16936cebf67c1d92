//! Password hashes: argon2id (RFC 9106) in PHC string form, with OWASP's recommended minimum
//! parameters: 19 MiB of memory, 2 iterations, 1 lane, a 16-byte random salt and a 32-byte
//! output. The parameters are stored in each hash, so raising them later leaves older hashes
//! verifiable. No password is stored, logged or returned in any other form.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use tokio::sync::Semaphore;

/// Memory cost in KiB (19 MiB).
pub const MEMORY_KIB: u32 = 19 * 1024;
/// Iterations.
pub const ITERATIONS: u32 = 2;
/// Lanes.
pub const LANES: u32 = 1;
/// Shortest password accepted.
pub const MIN_LENGTH: usize = 10;
/// Longest password accepted (hashing cost is bounded by the parameters, not the length, but
/// nobody needs more).
pub const MAX_LENGTH: usize = 1024;

/// At most this many passwords are hashed or verified at once, across all requests: each hash
/// holds [`MEMORY_KIB`] of memory, so a flood of sign-ins costs at most this many times 19 MiB.
pub const MAX_CONCURRENT: usize = 2;
/// How long a sign-in (or a password change) waits for a free hashing slot before it is
/// answered `503 busy`.
pub const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

static SLOTS: Semaphore = Semaphore::const_new(MAX_CONCURRENT);

/// Why a hash or a verification in a slot did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// Every hashing slot stayed taken for [`MAX_WAIT`].
    #[error("too many passwords are being checked at once")]
    Busy,
    /// The hashing task panicked (a defect).
    #[error("the hashing task failed: {0}")]
    Failed(String),
}

/// Runs `work` (a hash or a verification) on the blocking pool once one of the
/// [`MAX_CONCURRENT`] slots is free. The slot stays taken until `work` ends, even when the
/// caller stops waiting (a client that hangs up does not free memory still in use).
async fn in_slot<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SlotError> {
    let permit = tokio::time::timeout(MAX_WAIT, SLOTS.acquire())
        .await
        .map_err(|_| SlotError::Busy)?
        .map_err(|_| SlotError::Busy)?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    })
    .await
    .map_err(|e| SlotError::Failed(e.to_string()))
}

/// [`hash`] in a hashing slot.
pub async fn hash_in_slot(password: SecretString) -> Result<Result<String, HashError>, SlotError> {
    in_slot(move || hash(password.expose_secret())).await
}

/// [`verify`] in a hashing slot; `phc: None` verifies against [`decoy`] (a name that does not
/// exist costs as much as a wrong password).
pub async fn verify_in_slot(
    password: SecretString,
    phc: Option<String>,
) -> Result<bool, SlotError> {
    in_slot(move || match phc {
        Some(phc) => verify(password.expose_secret(), &phc),
        None => {
            verify(password.expose_secret(), decoy());
            false
        }
    })
    .await
}

fn hasher() -> Result<Argon2<'static>, argon2::Error> {
    let params = Params::new(MEMORY_KIB, ITERATIONS, LANES, Some(32))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// Why a password is not acceptable, as a sentence.
pub fn check(password: &str) -> Result<(), String> {
    let n = password.chars().count();
    if n < MIN_LENGTH {
        return Err(format!("must be at least {MIN_LENGTH} characters long"));
    }
    if password.len() > MAX_LENGTH {
        return Err(format!("must be at most {MAX_LENGTH} bytes long"));
    }
    if password.contains('\0') {
        return Err("must not contain a NUL character".into());
    }
    Ok(())
}

/// Hashing a password failed (a defect: the salt or the Argon2 parameters were refused).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {message}")]
pub struct HashError {
    what: &'static str,
    message: String,
}

impl HashError {
    fn new(what: &'static str, e: impl std::fmt::Display) -> Self {
        Self {
            what,
            message: e.to_string(),
        }
    }
}

/// The PHC string of `password` with a fresh salt. CPU-heavy (tens of ms): call it off the
/// async executor.
pub fn hash(password: &str) -> Result<String, HashError> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| HashError::new("salt", e))?;
    let hashed = hasher()
        .map_err(|e| HashError::new("argon2 parameters", e))?
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| HashError::new("hashing a password", e))?;
    Ok(hashed.to_string())
}

/// Whether `password` matches the stored `phc` string (false for a malformed one).
/// CPU-heavy: call it off the async executor.
pub fn verify(password: &str, phc: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok()
}

/// A hash of a password nobody knows, verified when a login names no existing user, so that the
/// answer takes as long as for a wrong password.
pub fn decoy() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        hash(&secret).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only_and_names_argon2id() {
        let h = hash("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(verify("correct horse battery", &h));
        assert!(!verify("correct horse batterY", &h));
        assert!(!verify("correct horse battery", "not a hash"));
        assert_ne!(h, hash("correct horse battery").unwrap(), "salted");
    }

    #[test]
    fn weak_passwords_are_refused_with_the_reason() {
        assert!(check("short").unwrap_err().contains("at least 10"));
        assert!(check("long enough!").is_ok());
        assert!(check(&"x".repeat(2000)).is_err());
    }
}
