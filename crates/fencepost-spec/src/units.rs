//! The one parser of the quantities users type: durations, probabilities,
//! rates, sizes, counts, switches. Every command and the Python API go through
//! it, so `10mb` or `1h` means the same everywhere; every error says what form
//! is accepted.

use std::fmt;

/// A value that does not parse; the caller adds which option it was given to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError(pub String);

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnitError {}

/// Splits `"1.5ms"` into (1.5, "ms"). The number may not be empty, NaN or infinite.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let text = text.trim();
    // "e" and signs belong to the number: no unit starts with them.
    let end = text.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))).unwrap_or(text.len());
    let (number, unit) = text.split_at(end);
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some((value, unit.trim()))
}

/// `10ms`, `1.5s`, `250us`, `2m` or `2min`, `1h`, or `0`; returns microseconds.
pub fn parse_duration(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError(format!("{text:?} is not a duration; expected a number with a unit, like 10ms, 1.5s, 250us, 2min or 1h"));
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "us" | "µs" => 1.0,
        "ms" => 1e3,
        "s" | "sec" => 1e6,
        "m" | "min" => 60e6,
        "h" => 3600e6,
        "" if value == 0.0 => 1.0,
        _ => return Err(err()),
    };
    if value < 0.0 {
        return Err(UnitError(format!("{text:?} is negative; a duration is 0 or more")));
    }
    let micros = (value * scale).round();
    if micros > u64::MAX as f64 / 2.0 {
        return Err(UnitError(format!("{text:?} is too long")));
    }
    Ok(micros as u64)
}

/// `10%` or `0.1`, between 0 and 1 inclusive.
pub fn parse_probability(text: &str) -> Result<f64, UnitError> {
    let err = || UnitError(format!("{text:?} is not a probability; expected a percentage like 10% or a fraction like 0.1, from 0 to 100%"));
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let p = match unit {
        "%" => value / 100.0,
        "" => value,
        _ => return Err(err()),
    };
    if !(0.0..=1.0).contains(&p) {
        return Err(UnitError(format!("{text:?} is out of range; a probability is from 0 to 100% (0 to 1)")));
    }
    Ok(p)
}

/// `100mbit`, `1.5gbit`, `500kbit`, `12mbps` (bits per second); returns bits per second.
pub fn parse_rate(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError(format!("{text:?} is not a rate; expected a number with a unit, like 100mbit, 1.5gbit, 500kbit or 12mbps (bits per second)"));
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "bit" | "bps" | "bit/s" => 1.0,
        "kbit" | "kbps" | "kbit/s" => 1e3,
        "mbit" | "mbps" | "mbit/s" => 1e6,
        "gbit" | "gbps" | "gbit/s" => 1e9,
        _ => return Err(err()),
    };
    if value < 0.0 {
        return Err(UnitError(format!("{text:?} is negative; a rate is at least 1bit")));
    }
    let bps = (value * scale).round();
    if bps < 1.0 {
        return Err(UnitError(format!("{text:?} is too small; a rate is at least 1bit")));
    }
    if bps > 1e15 {
        return Err(UnitError(format!("{text:?} is too large; rates go up to 1000000gbit")));
    }
    Ok(bps as u64)
}

/// `1000000`, `64kB`, `1.5MB`, `10mb`, `1GB`, `64KiB`: bytes, with k/M/G = 1000 and
/// Ki/Mi/Gi = 1024, in any case (`B` is optional); returns bytes.
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError(format!("{text:?} is not a size; expected bytes like 1000000, 64kB, 1.5MB, 1GB or 64KiB"));
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(err()),
    };
    if value < 0.0 {
        return Err(UnitError(format!("{text:?} is negative; a size is 0 bytes or more")));
    }
    let bytes = (value * scale).round();
    if bytes > 1e18 {
        return Err(UnitError(format!("{text:?} is too large")));
    }
    Ok(bytes as u64)
}

/// A whole number, at least `min`.
pub fn parse_count(text: &str, min: u64) -> Result<u64, UnitError> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|&n| n >= min)
        .ok_or_else(|| UnitError(format!("{text:?} is not a whole number of at least {min}")))
}

/// `true`/`false`, `on`/`off`, `yes`/`no`, `1`/`0`.
pub fn parse_switch(text: &str) -> Result<bool, UnitError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err(UnitError(format!("{text:?} is not a switch; accepted: on, off (or true, false)"))),
    }
}

/// A queue limit: a size (`64kB`) or a packet count (`100pkt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueSize {
    Unlimited,
    Bytes(u64),
    Packets(u64),
}

/// An Ethernet MTU's IP packet: the size a bare-number byte queue must hold at least.
const FULL_PACKET_BYTES: u64 = 1_500;

pub fn parse_queue(text: &str) -> Result<QueueSize, UnitError> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("inf") {
        return Ok(QueueSize::Unlimited);
    }
    if let Some(count) = t.strip_suffix("pkt").or_else(|| t.strip_suffix("packets")).or_else(|| t.strip_suffix("p")) {
        return count
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .map(QueueSize::Packets)
            .ok_or_else(|| UnitError(format!("{text:?} is not a queue size; expected a packet count like 100pkt, or bytes like 64kB")));
    }
    let bare = split_number(t).is_some_and(|(_, unit)| unit.is_empty());
    match parse_bytes(t) {
        Ok(0) => Err(UnitError(format!("{text:?}: a queue holds at least one byte"))),
        // A bare number is bytes, and one this small drops every full-sized packet, so the
        // run would only time out: most likely a packet count was meant (mahimahi and tc
        // count some queues in packets). Written with its unit (100B) it is taken as given.
        Ok(b) if bare && b < FULL_PACKET_BYTES => Err(UnitError(format!(
            "{text:?} would be {b} bytes, less than one full-sized packet ({FULL_PACKET_BYTES} bytes), so every such packet would be dropped; \
             write {b}pkt for {b} packets, or {b}B if bytes are meant"
        ))),
        Ok(b) => Ok(QueueSize::Bytes(b)),
        Err(_) => Err(UnitError(format!("{text:?} is not a queue size; expected bytes like 64kB or 26400, a packet count like 100pkt, or unlimited"))),
    }
}

/// `key=value,key=value` parameters after a `name:` prefix.
pub fn parse_params<'a>(text: &'a str, allowed: &[&str]) -> Result<Vec<(&'a str, &'a str)>, UnitError> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| UnitError(format!("{part:?} is not key=value; accepted keys: {}", allowed.join(", "))))?;
        let key = key.trim();
        if !allowed.contains(&key) {
            return Err(UnitError(format!("unknown parameter {key:?}; accepted: {}", allowed.join(", "))));
        }
        out.push((key, value.trim()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_users_type() {
        assert_eq!(parse_duration("10ms"), Ok(10_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000_000));
        assert_eq!(parse_duration("2min"), Ok(120_000_000));
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("1e3ms"), Ok(1_000_000));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("-1ms").unwrap_err().0.contains("negative"));
        assert_eq!(parse_probability("10%"), Ok(0.1));
        assert_eq!(parse_probability("0.3"), Ok(0.3));
        assert!(parse_probability("140%").unwrap_err().0.contains("out of range"));
        assert!(parse_probability("lots").is_err());
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("2.64mbps"), Ok(2_640_000));
        assert_eq!(parse_rate("1Gbit"), Ok(1_000_000_000));
        assert!(parse_rate("fast").unwrap_err().0.contains("100mbit"));
        assert_eq!(parse_bytes("1000000"), Ok(1_000_000));
        assert_eq!(parse_bytes("100MB"), Ok(100_000_000));
        assert_eq!(parse_bytes("10mb"), Ok(10_000_000));
        assert_eq!(parse_bytes("1.5gb"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("64KiB"), Ok(65_536));
        assert_eq!(parse_bytes("2e6"), Ok(2_000_000));
        assert!(parse_bytes("-5").unwrap_err().0.contains("negative"));
        assert!(parse_bytes("lots").is_err());
        assert_eq!(parse_queue("64kB"), Ok(QueueSize::Bytes(64_000)));
        assert_eq!(parse_queue("100pkt"), Ok(QueueSize::Packets(100)));
        assert_eq!(parse_queue("26400"), Ok(QueueSize::Bytes(26_400)));
        assert!(parse_queue("0pkt").is_err());
        // A bare number too small for one full packet is refused with the two readings
        // offered; with its unit it is taken as bytes, and 1500 and more bare as before.
        let small = parse_queue("100").unwrap_err().0;
        assert!(small.contains("100pkt") && small.contains("100B"), "{small}");
        assert_eq!(parse_queue("100B"), Ok(QueueSize::Bytes(100)));
        assert_eq!(parse_queue("1500"), Ok(QueueSize::Bytes(1_500)));
        assert_eq!(parse_count("12", 1), Ok(12));
        assert!(parse_count("0", 1).is_err());
        assert_eq!(parse_switch("on"), Ok(true));
        assert_eq!(parse_switch("False"), Ok(false));
        assert_eq!(parse_params("p=0.1, r=0.3", &["p", "r"]), Ok(vec![("p", "0.1"), ("r", "0.3")]));
        assert!(parse_params("q=1", &["p", "r"]).unwrap_err().0.contains("accepted: p, r"));
    }
}
