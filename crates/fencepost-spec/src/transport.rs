//! A flow's transport from options: profile, loss recovery, congestion control,
//! packet size, idle timeout. Congestion controllers are named in `--cc` specs;
//! controllers from outside fencepost (written in Python, say) join the names
//! with [`register_controller`].

use crate::options::{fail, OptionError, CC_FORMS};
use crate::units::{self, parse_params, UnitError};
use fencepost_proto::congestion::{BbrConfig, CubicConfig};
use fencepost_proto::redundancy::FecCode;
use fencepost_proto::{Arq, Cipher, ControllerConfig, Duration, FixedConfig, Profile, ProtectionConfig, PublicKey, RedundancyConfig, RenoConfig, StaticKey, TransportConfig};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Reads the parameters after `name:` into a controller configuration.
pub type ControllerParser = Arc<dyn Fn(&str) -> Result<ControllerConfig, UnitError> + Send + Sync>;

fn registry() -> &'static RwLock<BTreeMap<String, ControllerParser>> {
    static REGISTRY: std::sync::OnceLock<RwLock<BTreeMap<String, ControllerParser>>> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| RwLock::new(BTreeMap::new()))
}

/// Makes `--cc NAME[:params]` build a controller from outside fencepost. The built-in
/// names (`none`, `tahoe`, `reno`, `cubic`, `bbr`, `tolerant`) cannot be replaced.
pub fn register_controller(name: &str, parse: ControllerParser) -> Result<(), UnitError> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(UnitError(format!("{name:?} is not a controller name; use letters, digits, - and _")));
    }
    if matches!(name, "none" | "tahoe" | "reno" | "cubic" | "bbr" | "tolerant") {
        return Err(UnitError(format!("{name:?} is a built-in controller")));
    }
    registry().write().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), parse);
    Ok(())
}

/// Names of the controllers registered from outside.
pub fn registered_controllers() -> Vec<String> {
    registry().read().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
}

fn number(key: &str, value: &str) -> Result<u64, UnitError> {
    value.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| UnitError(format!("{key}: {value:?} is not a whole number of packets (1 or more)")))
}

fn switch(key: &str, value: &str) -> Result<bool, UnitError> {
    units::parse_switch(value).map_err(|e| UnitError(format!("{key}: {e}")))
}

/// `none[:window=N,rate=R,pacing=on|off]`, `tahoe`/`reno[:iw=N,ssthresh=N,pacing=on|off]`, or a registered name.
/// `none` starts from the profile's own fixed window, so `none:window=32` keeps its pacing
/// (on a profile whose controller is not fixed, from 64 packets paced over the RTT).
pub fn parse_cc(spec: &str, transport: &TransportConfig) -> Result<ControllerConfig, UnitError> {
    let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
    match name {
        "none" => {
            let mut config = match &transport.controller {
                ControllerConfig::Fixed(f) => f.clone(),
                // A profile with another controller: 64 packets paced over the RTT, the
                // fixed window the default profile had before `tolerant`.
                _ => FixedConfig::default().window_packets(64).pace_by_rtt(true),
            };
            for (key, value) in parse_params(params, &["window", "rate", "pacing"])? {
                match key {
                    "window" => config = config.window_packets(number(key, value)?),
                    "pacing" => config = config.pace_by_rtt(switch(key, value)?),
                    _ => config = config.pacing_rate(Some(units::parse_rate(value).map_err(|e| UnitError(format!("rate: {e}")))? / 8)),
                }
            }
            Ok(ControllerConfig::Fixed(config))
        }
        "tahoe" | "reno" => {
            let mut config = RenoConfig::default();
            for (key, value) in parse_params(params, &["iw", "ssthresh", "pacing"])? {
                match key {
                    "iw" => config = config.initial_window(number(key, value)?),
                    "ssthresh" => config = config.initial_ssthresh(Some(number(key, value)?)),
                    _ => config = config.pacing(switch(key, value)?),
                }
            }
            Ok(if name == "tahoe" { ControllerConfig::Tahoe(config) } else { ControllerConfig::Reno(config) })
        }
        "cubic" => {
            let mut config = CubicConfig::default();
            for (key, value) in parse_params(params, &["iw", "pacing", "hystart"])? {
                match key {
                    "iw" => config = config.initial_window(number(key, value)?),
                    "pacing" => config = config.pacing(switch(key, value)?),
                    _ => config = config.hystart(switch(key, value)?),
                }
            }
            Ok(ControllerConfig::Cubic(config))
        }
        "bbr" | "tolerant" => {
            let mut config = if name == "bbr" { BbrConfig::v1() } else { BbrConfig::tolerant() };
            for (key, value) in parse_params(params, &["iw"])? {
                debug_assert_eq!(key, "iw");
                config = config.initial_window(number(key, value)?);
            }
            Ok(ControllerConfig::Bbr(config))
        }
        other => {
            let parser = registry().read().unwrap_or_else(|p| p.into_inner()).get(other).cloned();
            match parser {
                Some(parse) => parse(params),
                None => {
                    let mut accepted = CC_FORMS.to_string();
                    for name in registered_controllers() {
                        accepted.push_str(", ");
                        accepted.push_str(&name);
                    }
                    Err(UnitError(format!("{other:?} is not a congestion controller; accepted: {accepted}")))
                }
            }
        }
    }
}

/// The controller as a spec string `parse_cc` reads back.
pub fn describe_cc(config: &ControllerConfig) -> String {
    match config {
        ControllerConfig::Fixed(f) => match f.pacing_rate {
            Some(rate) => format!("none:window={},rate={}bit", f.window_packets, rate * 8),
            None => format!("none:window={},pacing={}", f.window_packets, if f.pace_by_rtt { "on" } else { "off" }),
        },
        ControllerConfig::Tahoe(t) | ControllerConfig::Reno(t) => {
            let mut s = format!("{}:iw={}", config.name(), t.initial_window);
            if let Some(ss) = t.initial_ssthresh {
                s.push_str(&format!(",ssthresh={ss}"));
            }
            s.push_str(if t.pacing { ",pacing=on" } else { ",pacing=off" });
            s
        }
        ControllerConfig::Cubic(c) => {
            let on = |b: bool| if b { "on" } else { "off" };
            format!("cubic:iw={},pacing={},hystart={}", c.initial_window, on(c.pacing), on(c.hystart))
        }
        ControllerConfig::Bbr(b) => format!("{}:iw={}", config.name(), b.initial_window),
        ControllerConfig::Custom(factory) => factory.describe(),
    }
}

/// The accepted redundancy forms, for help and errors.
pub const REDUNDANCY_FORMS: &str = "none, dup:R (a share of packets sent twice, like dup:50%), fec:rs:K/N (Reed-Solomon: N-K repairs after every K packets), \
fec:window:W/R (one repair over the last W packets after every R) or fec:adaptive[:budget=B,transfers=off] (repairs as the loss needs, at most B of the data, default 50%; transfers=off: none for a transfer that fills the path)";

fn fraction(text: &str, what: &str) -> Result<(u8, u8), UnitError> {
    let bad = || UnitError(format!("{what}: {text:?} is not two whole numbers like 8/12"));
    let (a, b) = text.split_once('/').ok_or_else(bad)?;
    Ok((a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?))
}

/// `none`, `dup:R`, `fec:rs:K/N`, `fec:window:W/R` or `fec:adaptive[:budget=B]`.
pub fn parse_redundancy(spec: &str) -> Result<RedundancyConfig, UnitError> {
    let mut parts = spec.splitn(3, ':');
    match (parts.next().unwrap_or(""), parts.next(), parts.next()) {
        ("none", None, None) => Ok(RedundancyConfig::None),
        ("dup", Some(share), None) => Ok(RedundancyConfig::Duplicate { share: units::parse_probability(share)? }),
        ("fec", Some("rs"), Some(kn)) => {
            let (k, n) = fraction(kn, "fec:rs:K/N")?;
            if k == 0 || n <= k || n == 255 {
                return Err(UnitError(format!("fec:rs:{kn}: need 1 <= K < N <= 254 (K source packets, N - K repairs)")));
            }
            Ok(RedundancyConfig::Fec(FecCode::Block { k, n }))
        }
        ("fec", Some("window"), Some(wr)) => {
            let (window, every) = fraction(wr, "fec:window:W/R")?;
            if window == 0 || every == 0 || every == u8::MAX {
                return Err(UnitError(format!("fec:window:{wr}: need W >= 1 packets covered and one repair every R (1 to 254) packets")));
            }
            Ok(RedundancyConfig::Fec(FecCode::Window { window, every }))
        }
        ("fec", Some("adaptive"), params) => {
            let (mut budget, mut transfers) = (0.5, true);
            for (key, value) in parse_params(params.unwrap_or(""), &["budget", "transfers"])? {
                match key {
                    "budget" => budget = units::parse_probability(value).map_err(|e| UnitError(format!("budget: {e}")))?,
                    _ => transfers = units::parse_switch(value).map_err(|e| UnitError(format!("transfers: {e}")))?,
                }
            }
            Ok(RedundancyConfig::AdaptiveFec { budget, transfers })
        }
        _ => Err(UnitError(format!("{spec:?} is not a redundancy; accepted: {REDUNDANCY_FORMS}"))),
    }
}

/// Key files hold one line of base64; anything longer is not a key file.
const MAX_KEY_FILE: u64 = 4096;

/// Reads a private key written by `fencepost keygen`.
pub fn read_key_file(path: &str) -> Result<StaticKey, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_KEY_FILE + 1).read_to_string(&mut text).map_err(|e| format!("cannot read {path}: {e}"))?;
    if text.len() as u64 > MAX_KEY_FILE {
        return Err(format!("{path} is not a key file: longer than {MAX_KEY_FILE} bytes"));
    }
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
    StaticKey::parse(line).map_err(|e| format!("{path}: {e}"))
}

/// A transport configuration from transport options, looked up by name
/// (`get("cc")`); options not given keep the profile's values.
pub fn transport_config<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<TransportConfig, OptionError> {
    let profile = match get("profile").unwrap_or("default") {
        "seed" => Profile::Seed,
        "default" => Profile::Default,
        other => return Err(fail("profile", format!("{other:?} is not a profile; accepted: seed, default"))),
    };
    let mut transport = TransportConfig::for_profile(profile);
    transport.arq = match get("arq").unwrap_or("fence") {
        "fence" => Arq::Fence,
        "window" => Arq::Window,
        other => return Err(fail("arq", format!("{other:?} is not a loss-recovery mode; accepted: fence, window"))),
    };
    if let Some(spec) = get("cc").filter(|s| !s.is_empty()) {
        transport.controller = parse_cc(spec, &transport).map_err(|e| fail("cc", e))?;
    }
    // Before the payload size: a size given by hand is not resized for the redundancy.
    if let Some(spec) = get("redundancy").filter(|s| !s.is_empty()) {
        transport.set_redundancy(parse_redundancy(spec).map_err(|e| fail("redundancy", e))?);
    }
    if let Some(size) = get("packet-size").filter(|s| !s.is_empty()) {
        let bytes = units::parse_bytes(size).map_err(|e| fail("packet-size", e))?;
        if !(16..=65_000).contains(&bytes) {
            return Err(fail("packet-size", format!("{bytes} bytes is out of range; a payload is 16 to 65000 bytes")));
        }
        transport.max_payload = bytes as u16;
    }
    if let Some(accept) = get("accept-repairs").filter(|s| !s.is_empty()) {
        transport.accept_repairs = units::parse_switch(accept).map_err(|e| fail("accept-repairs", e))?;
    }
    if let Some(insecure) = get("insecure").filter(|s| !s.is_empty()) {
        if units::parse_switch(insecure).map_err(|e| fail("insecure", e))? {
            transport.set_protection(ProtectionConfig::None);
        }
    }
    if let ProtectionConfig::Noise(noise) = &mut transport.protection {
        if let Some(cipher) = get("cipher").filter(|s| !s.is_empty()) {
            noise.cipher = Cipher::parse(cipher).ok_or_else(|| fail("cipher", format!("{cipher:?} is not a cipher; accepted: aes-256-gcm, chacha20-poly1305")))?;
        }
        if let Some(path) = get("key").filter(|s| !s.is_empty()) {
            noise.local = Some(read_key_file(path).map_err(|e| fail("key", e))?);
        }
        if let Some(key) = get("peer-key").filter(|s| !s.is_empty()) {
            noise.peer = Some(PublicKey::parse(key).map_err(|e| fail("peer-key", e))?);
        }
        if let Some(retry) = get("retry").filter(|s| !s.is_empty()) {
            noise.validate_addresses = units::parse_switch(retry).map_err(|e| fail("retry", e))?;
        }
    } else {
        for name in ["key", "peer-key", "cipher"] {
            if get(name).is_some_and(|v| !v.is_empty()) {
                let why = if transport.profile == Profile::Seed { "the seed profile is plaintext" } else { "--insecure turns protection off" };
                return Err(fail(name, format!("needs packet protection, and {why}")));
            }
        }
    }
    if transport.redundancy.sends_repairs() && transport.max_payload == fencepost_proto::config::mtu_payload(transport.protection.overhead()) {
        // An MTU-sized payload given by hand: shortened as the profile's would be, so repairs fit.
        transport.max_payload = transport.mtu_sized_payload();
    }
    if let Some(idle) = get("idle-timeout").filter(|s| !s.is_empty()) {
        let idle = units::parse_duration(idle).map_err(|e| fail("idle-timeout", e))?;
        if idle == 0 {
            return Err(fail("idle-timeout", "must be more than 0"));
        }
        transport.idle_timeout = Duration::from_micros(idle);
    }
    Ok(transport)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cc_specs_round_trip() {
        let t = TransportConfig::default_profile();
        for spec in ["none:window=64,pacing=off", "none:window=10,rate=8000000bit", "tahoe:iw=1,ssthresh=10,pacing=off", "none:window=8,pacing=on", "reno:iw=10,pacing=on", "cubic:iw=10,pacing=on,hystart=off", "bbr:iw=10", "tolerant:iw=32"] {
            let cc = parse_cc(spec, &t).unwrap();
            assert_eq!(describe_cc(&cc), spec);
        }
        assert!(parse_cc("vegas", &t).unwrap_err().0.contains("tahoe"));
    }

    #[derive(Debug)]
    struct Outside;
    impl fencepost_proto::ControllerFactory for Outside {
        fn build(&self, mss: u64) -> Box<dyn fencepost_proto::Controller> {
            Box::new(fencepost_proto::congestion::Fixed::new(FixedConfig::default().window_packets(3), mss))
        }
        fn name(&self) -> &str {
            "outside"
        }
        fn describe(&self) -> String {
            "outside".into()
        }
    }

    #[test]
    fn controllers_from_outside_join_the_names() {
        register_controller("outside", Arc::new(|params: &str| {
            if params.is_empty() { Ok(ControllerConfig::Custom(Arc::new(Outside))) } else { Err(UnitError("takes no parameters".into())) }
        }))
        .unwrap();
        let t = transport_config(|k| (k == "cc").then_some("outside")).unwrap();
        assert_eq!(t.controller.name(), "outside");
        assert_eq!(describe_cc(&t.controller), "outside");
        assert!(transport_config(|k| (k == "cc").then_some("outside:x=1")).unwrap_err().message.contains("no parameters"));
        assert!(register_controller("tahoe", Arc::new(|_: &str| Err(UnitError(String::new())))).is_err());
        assert!(parse_cc("nope", &TransportConfig::default()).unwrap_err().0.contains("outside"));
    }
}
