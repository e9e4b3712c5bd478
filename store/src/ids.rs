//! Ids (a letter, then the time and randomness) and the clock they and the
//! stores read.

/// `prefix` then 26 characters: 10 of the time in milliseconds, 16 random.
pub(crate) fn new_id(prefix: char) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0) as u64;
    let mut random = [0u8; 10];
    fill_random(&mut random);
    let mut id = String::with_capacity(27);
    id.push(prefix);
    for i in (0..10).rev() {
        id.push(ALPHABET[((now >> (i * 5)) & 31) as usize] as char);
    }
    let mut bits: u128 = 0;
    for b in random {
        bits = (bits << 8) | u128::from(b);
    }
    for i in (0..16).rev() {
        id.push(ALPHABET[((bits >> (i * 5)) & 31) as usize] as char);
    }
    id
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn fill_random(buf: &mut [u8]) {
    // The operating system's random source does not fail on a working
    // system; std's own hash maps panic too when it does.
    if let Err(e) = getrandom::fill(buf) {
        panic!("the operating system's random source failed: {e}");
    }
}
