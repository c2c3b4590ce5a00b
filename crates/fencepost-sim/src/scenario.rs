//! A scenario: workload, transport settings and both link directions, built
//! from `option = value` pairs (the `fencepost sim` options, also the keys of
//! experiment files). Errors name the option and the accepted form.

use crate::units::{self, parse_params, QueueSize, UnitError};
use fencepost_link::{Bandwidth, LinkConfig, LossModel, QueueLimit, Trace};
use fencepost_proto::{Arq, ControllerConfig, Duration, FixedConfig, Profile, TahoeConfig, TransportConfig};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Every option a scenario accepts, with its default ("" = none).
pub const OPTIONS: &[(&str, &str)] = &[
    ("workload", "bulk"),
    ("bytes", "1MB"),
    ("duration", ""),
    ("messages", "1000"),
    ("delay", "10ms"),
    ("jitter", "0"),
    ("keep-order", "false"),
    ("loss", "0%"),
    ("loss-up", ""),
    ("loss-down", ""),
    ("loss-model", "bernoulli"),
    ("rate", ""),
    ("trace", ""),
    ("queue", "unlimited"),
    ("dup", "0%"),
    ("arq", "fence"),
    ("cc", ""),
    ("profile", "default"),
    ("packet-size", ""),
    ("idle-timeout", ""),
    ("seed", "1"),
    ("timeout", "3600s"),
];

/// An option with a value that is not acceptable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    pub option: String,
    pub message: String,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{}: {}", self.option, self.message)
    }
}

impl std::error::Error for OptionError {}

#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// The client sends `bytes` of seeded random data and closes; the server reads it all and closes.
    /// With `duration`, the client instead writes as fast as it can for that long, then closes.
    Bulk { bytes: u64, duration: Option<Duration> },
    /// The seed article's benchmark: `messages` random messages of 200–400 bytes,
    /// 2–20 ms apart, echoed back by the server.
    Echo { messages: u32 },
}

impl Workload {
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Bulk { .. } => "bulk",
            Workload::Echo { .. } => "echo",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub workload: Workload,
    pub transport: TransportConfig,
    /// Client to server.
    pub up: LinkConfig,
    /// Server to client.
    pub down: LinkConfig,
    pub seed: u64,
    /// Virtual-time bound on the whole run.
    pub timeout: Duration,
    /// Bytes of IP and UDP header each datagram occupies on a link.
    pub header_overhead: usize,
    /// The options the scenario was built from, defaults filled in.
    pub options: BTreeMap<String, String>,
}

fn fail(option: &str, e: impl fmt::Display) -> OptionError {
    OptionError { option: option.to_string(), message: e.to_string() }
}

/// The options that shape the transport itself (not the workload or the link):
/// what `fencepost serve`/`send` and the socket API accept.
pub const TRANSPORT_OPTIONS: &[&str] = &["profile", "arq", "cc", "packet-size", "idle-timeout"];

/// A transport configuration from transport options only.
pub fn transport_from_options<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<TransportConfig, OptionError> {
    let pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
    for (key, _) in &pairs {
        let key = key.trim_start_matches("--").replace('_', "-");
        if !TRANSPORT_OPTIONS.contains(&key.as_str()) {
            return Err(fail(&key, format!("not a transport option; accepted: {}", TRANSPORT_OPTIONS.join(", "))));
        }
    }
    Ok(Scenario::from_options(pairs)?.transport)
}

impl Scenario {
    /// Builds a scenario from option pairs; unknown options and bad values are errors.
    pub fn from_options<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Scenario, OptionError> {
        let mut given: BTreeMap<String, String> = BTreeMap::new();
        for (key, value) in pairs {
            let key = key.trim_start_matches("--").replace('_', "-");
            if !OPTIONS.iter().any(|(k, _)| *k == key) {
                let accepted: Vec<&str> = OPTIONS.iter().map(|(k, _)| *k).collect();
                return Err(fail(&key, format!("unknown option; accepted: {}", accepted.join(", "))));
            }
            given.insert(key, value.trim().to_string());
        }
        let get = |key: &str| -> Option<&str> {
            given.get(key).map(String::as_str).or_else(|| OPTIONS.iter().find(|(k, _)| *k == key).map(|(_, d)| *d)).filter(|v| !v.is_empty())
        };
        let dur = |key: &str| -> Result<Option<Duration>, OptionError> {
            get(key).map(|v| units::parse_duration(v).map(Duration::from_micros).map_err(|e| fail(key, e))).transpose()
        };
        let prob = |key: &str| -> Result<Option<f64>, OptionError> {
            get(key).map(|v| units::parse_probability(v).map_err(|e| fail(key, e))).transpose()
        };

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
        if let Some(spec) = get("cc") {
            transport.controller = parse_cc(spec, &transport).map_err(|e| fail("cc", e))?;
        }
        if let Some(size) = get("packet-size") {
            let bytes = units::parse_bytes(size).map_err(|e| fail("packet-size", e))?;
            if !(16..=65_000).contains(&bytes) {
                return Err(fail("packet-size", format!("{bytes} bytes is out of range; a payload is 16 to 65000 bytes")));
            }
            transport.max_payload = bytes as u16;
        }
        if let Some(idle) = dur("idle-timeout")? {
            if idle == Duration::ZERO {
                return Err(fail("idle-timeout", "must be more than 0"));
            }
            transport.idle_timeout = idle;
        }

        let workload = match get("workload").unwrap_or("bulk") {
            "bulk" => {
                let duration = dur("duration")?;
                if duration.is_some() && given.contains_key("bytes") {
                    return Err(fail("duration", "give either --bytes or --duration for a bulk transfer, not both"));
                }
                if duration == Some(Duration::ZERO) {
                    return Err(fail("duration", "must be more than 0"));
                }
                let bytes = match duration {
                    Some(_) => u64::MAX,
                    None => units::parse_bytes(get("bytes").unwrap_or("1MB")).map_err(|e| fail("bytes", e))?,
                };
                if bytes == 0 {
                    return Err(fail("bytes", "must be at least 1 byte"));
                }
                Workload::Bulk { bytes, duration }
            }
            "echo" => {
                let messages: u32 = get("messages")
                    .unwrap_or("1000")
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| fail("messages", "expected a whole number of messages, at least 1"))?;
                Workload::Echo { messages }
            }
            other => return Err(fail("workload", format!("{other:?} is not a workload; accepted: bulk, echo"))),
        };

        let loss = prob("loss")?.unwrap_or(0.0);
        let loss_up = prob("loss-up")?.unwrap_or(loss);
        let loss_down = prob("loss-down")?.unwrap_or(loss);
        let model = get("loss-model").unwrap_or("bernoulli");
        let (loss_model_up, loss_model_down) = if model == "bernoulli" {
            (bernoulli(loss_up), bernoulli(loss_down))
        } else if let Some(params) = model.strip_prefix("gilbert:").or_else(|| (model == "gilbert").then_some("")) {
            if given.contains_key("loss") || given.contains_key("loss-up") || given.contains_key("loss-down") {
                return Err(fail("loss-model", "gilbert sets its own loss rates (good=, bad=); do not combine it with --loss"));
            }
            let ge = parse_gilbert(params).map_err(|e| fail("loss-model", e))?;
            (ge.clone(), ge)
        } else {
            return Err(fail("loss-model", format!("{model:?} is not a loss model; accepted: bernoulli, gilbert:p=P,r=R[,good=G,bad=B]")));
        };

        let bandwidth = match (get("rate"), get("trace")) {
            (Some(_), Some(_)) => return Err(fail("trace", "give either --rate or --trace, not both")),
            (Some(rate), None) => Bandwidth::Rate(units::parse_rate(rate).map_err(|e| fail("rate", e))?),
            (None, Some(path)) => Bandwidth::Trace(Arc::new(Trace::from_file(Path::new(path)).map_err(|e| fail("trace", format!("{path}: {e}")))?)),
            (None, None) => Bandwidth::Unlimited,
        };
        let queue = match units::parse_queue(get("queue").unwrap_or("unlimited")).map_err(|e| fail("queue", e))? {
            QueueSize::Unlimited => QueueLimit::Unlimited,
            QueueSize::Bytes(b) => QueueLimit::Bytes(b),
            QueueSize::Packets(p) => QueueLimit::Packets(p),
        };
        let keep_order = match get("keep-order").unwrap_or("false") {
            "true" | "yes" | "on" | "1" => true,
            "false" | "no" | "off" | "0" => false,
            other => return Err(fail("keep-order", format!("{other:?} is not a switch; accepted: true, false"))),
        };
        let link = LinkConfig {
            delay: dur("delay")?.unwrap_or(Duration::ZERO).total_micros(),
            jitter: dur("jitter")?.unwrap_or(Duration::ZERO).total_micros(),
            keep_order,
            loss: LossModel::None,
            duplicate: prob("dup")?.unwrap_or(0.0),
            bandwidth,
            queue,
        };
        let seed: u64 = get("seed")
            .unwrap_or("1")
            .parse()
            .map_err(|_| fail("seed", "expected a whole number from 0 to 18446744073709551615"))?;
        let timeout = dur("timeout")?.unwrap_or(Duration::from_secs(3600));
        if timeout == Duration::ZERO {
            return Err(fail("timeout", "must be more than 0"));
        }

        let mut options: BTreeMap<String, String> =
            OPTIONS.iter().filter(|(_, d)| !d.is_empty()).map(|(k, d)| (k.to_string(), d.to_string())).collect();
        options.extend(given);
        if options.contains_key("duration") {
            options.remove("bytes");
        }
        options.insert("cc".into(), describe_cc(&transport.controller));
        Ok(Scenario {
            workload,
            up: LinkConfig { loss: loss_model_up, ..link.clone() },
            down: LinkConfig { loss: loss_model_down, ..link },
            transport,
            seed,
            timeout,
            header_overhead: 28,
            options,
        })
    }
}

fn bernoulli(p: f64) -> LossModel {
    if p > 0.0 { LossModel::Bernoulli(p) } else { LossModel::None }
}

fn parse_gilbert(params: &str) -> Result<LossModel, UnitError> {
    let (mut p, mut r, mut good, mut bad) = (None, None, 0.0, 1.0);
    for (key, value) in parse_params(params, &["p", "r", "good", "bad"])? {
        let v = units::parse_probability(value).map_err(|e| UnitError(format!("{key}: {e}")))?;
        match key {
            "p" => p = Some(v),
            "r" => r = Some(v),
            "good" => good = v,
            _ => bad = v,
        }
    }
    let (Some(p), Some(r)) = (p, r) else {
        return Err(UnitError("gilbert needs p (good to bad) and r (bad to good), like gilbert:p=0.01,r=0.3[,good=0,bad=1]".into()));
    };
    if p + r == 0.0 {
        return Err(UnitError("p and r cannot both be 0".into()));
    }
    Ok(LossModel::GilbertElliott { p, r, loss_good: good, loss_bad: bad })
}

fn switch(value: &str) -> Result<bool, UnitError> {
    match value {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(UnitError(format!("pacing: {value:?}; accepted: on, off"))),
    }
}

/// `none[:window=N,rate=R,pacing=on|off]` or `tahoe[:iw=N,ssthresh=N,pacing=on|off]`.
pub fn parse_cc(spec: &str, transport: &TransportConfig) -> Result<ControllerConfig, UnitError> {
    let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
    let number = |key: &str, value: &str| -> Result<u64, UnitError> {
        value.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| UnitError(format!("{key}: {value:?} is not a whole number of packets (1 or more)")))
    };
    match name {
        "none" => {
            let mut config = match &transport.controller {
                ControllerConfig::Fixed(f) => f.clone(),
                _ => FixedConfig::default(),
            };
            for (key, value) in parse_params(params, &["window", "rate", "pacing"])? {
                match key {
                    "window" => config = config.window_packets(number(key, value)?),
                    "pacing" => config = config.pace_by_rtt(switch(value)?),
                    _ => config = config.pacing_rate(Some(units::parse_rate(value).map_err(|e| UnitError(format!("rate: {e}")))? / 8)),
                }
            }
            Ok(ControllerConfig::Fixed(config))
        }
        "tahoe" => {
            let mut config = TahoeConfig::default();
            for (key, value) in parse_params(params, &["iw", "ssthresh", "pacing"])? {
                match key {
                    "iw" => config = config.initial_window(number(key, value)?),
                    "ssthresh" => config = config.initial_ssthresh(Some(number(key, value)?)),
                    _ => config = config.pacing(switch(value)?),
                }
            }
            Ok(ControllerConfig::Tahoe(config))
        }
        other => Err(UnitError(format!("{other:?} is not a congestion controller; accepted: none[:window=N,rate=R,pacing=on|off], tahoe[:iw=N,ssthresh=N,pacing=on|off]"))),
    }
}

/// The controller as a spec string `parse_cc` reads back.
pub fn describe_cc(config: &ControllerConfig) -> String {
    match config {
        ControllerConfig::Fixed(f) => match f.pacing_rate {
            Some(rate) => format!("none:window={},rate={}bit", f.window_packets, rate * 8),
            None => format!("none:window={},pacing={}", f.window_packets, if f.pace_by_rtt { "on" } else { "off" }),
        },
        ControllerConfig::Tahoe(t) => {
            let mut s = format!("tahoe:iw={}", t.initial_window);
            if let Some(ss) = t.initial_ssthresh {
                s.push_str(&format!(",ssthresh={ss}"));
            }
            s.push_str(if t.pacing { ",pacing=on" } else { ",pacing=off" });
            s
        }
        ControllerConfig::Custom(factory) => factory.describe(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(pairs: &[(&str, &str)]) -> Result<Scenario, OptionError> {
        Scenario::from_options(pairs.iter().copied())
    }

    #[test]
    fn errors_name_the_option_and_the_accepted_form() {
        let e = build(&[("loss", "140%")]).unwrap_err();
        assert_eq!(e.option, "loss");
        assert!(e.to_string().starts_with("--loss: "), "{e}");
        let e = build(&[("rate", "fast")]).unwrap_err();
        assert!(e.to_string().contains("--rate") && e.to_string().contains("100mbit"), "{e}");
        let e = build(&[("trace", "/nonexistent/trace")]).unwrap_err();
        assert!(e.to_string().starts_with("--trace: /nonexistent/trace: cannot read"), "{e}");
        let e = build(&[("colour", "red")]).unwrap_err();
        assert!(e.to_string().contains("unknown option") && e.to_string().contains("loss-model"), "{e}");
        let e = build(&[("cc", "cubic")]).unwrap_err();
        assert!(e.to_string().contains("tahoe"), "{e}");
        let e = build(&[("loss-model", "gilbert:p=0.1")]).unwrap_err();
        assert!(e.to_string().contains("needs p"), "{e}");
    }

    #[test]
    fn per_direction_loss_overrides_the_common_value() {
        let s = build(&[("loss", "30%"), ("loss-down", "0.1")]).unwrap();
        assert_eq!(s.up.loss, LossModel::Bernoulli(0.3));
        assert_eq!(s.down.loss, LossModel::Bernoulli(0.1));
        let s = build(&[("loss-model", "gilbert:p=1%,r=30%")]).unwrap();
        assert!((s.up.loss.mean_loss() - 0.01 / 0.31).abs() < 1e-12);
    }

    #[test]
    fn cc_specs_round_trip() {
        let t = TransportConfig::default_profile();
        for spec in ["none:window=64,pacing=off", "none:window=10,rate=8000000bit", "tahoe:iw=1,ssthresh=10,pacing=off", "none:window=8,pacing=on"] {
            let cc = parse_cc(spec, &t).unwrap();
            assert_eq!(describe_cc(&cc), spec);
        }
    }
}
