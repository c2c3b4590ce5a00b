//! One link (both directions) from link options, and link events.
//!
//! Every per-direction option `X` also exists as `X-up` (from the link's first
//! host to its second: client to server on a line) and `X-down`, which override
//! `X` for that direction.

use crate::options::{default_of, fail, OptionError};
use crate::units::{self, parse_params, QueueSize, UnitError};
use fencepost_link::{Bandwidth, JitterDistribution, LinkConfig, LossModel, LossPosition, QueueLimit, Trace};
use fencepost_proto::Duration;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One direction of a link, as the link's first host sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the link's first host to its second (client to server on a line).
    Up,
    /// From the second host to the first.
    Down,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// Trace files read once per run, however many links use them.
#[derive(Default)]
pub struct TraceCache {
    loaded: HashMap<PathBuf, Arc<Trace>>,
}

impl TraceCache {
    fn load(&mut self, option: &str, path: &str, base: Option<&Path>) -> Result<Arc<Trace>, OptionError> {
        let resolved = match base {
            Some(dir) if Path::new(path).is_relative() => dir.join(path),
            _ => PathBuf::from(path),
        };
        if let Some(trace) = self.loaded.get(&resolved) {
            return Ok(trace.clone());
        }
        let trace = Arc::new(Trace::from_file(&resolved).map_err(|e| fail(option, format!("{path}: {e}")))?);
        self.loaded.insert(resolved, trace.clone());
        Ok(trace)
    }
}

fn bernoulli(p: f64) -> LossModel {
    if p > 0.0 { LossModel::Bernoulli(p) } else { LossModel::None }
}

pub fn parse_gilbert(params: &str) -> Result<LossModel, UnitError> {
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

/// Both directions of a link from link options looked up by name (`get("delay-up")`);
/// `base` resolves relative trace paths (a scenario file's folder).
pub fn link_configs<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    base: Option<&Path>,
    traces: &mut TraceCache,
) -> Result<(LinkConfig, LinkConfig), OptionError> {
    let keep_order = units::parse_switch(get("keep-order").unwrap_or(default_of("keep-order"))).map_err(|e| fail("keep-order", e))?;
    let mut out = Vec::with_capacity(2);
    for direction in [Direction::Up, Direction::Down] {
        // The value for this direction and the name it was given under (for errors).
        let value = |name: &str| -> Option<(String, &'a str)> {
            let directed = format!("{name}-{}", direction.name());
            if let Some(v) = get(&directed) {
                return Some((directed, v));
            }
            get(name).map(|v| (name.to_string(), v))
        };
        let or_default = |name: &str| -> Option<(String, &'a str)> {
            value(name).or_else(|| Some((name.to_string(), default_of(name))).filter(|(_, d)| !d.is_empty()))
        };
        let duration = |name: &str| -> Result<u64, OptionError> {
            match or_default(name) {
                Some((given, v)) => units::parse_duration(v).map_err(|e| fail(&given, e)),
                None => Ok(0),
            }
        };
        let probability = |name: &str| -> Result<f64, OptionError> {
            match or_default(name) {
                Some((given, v)) => units::parse_probability(v).map_err(|e| fail(&given, e)),
                None => Ok(0.0),
            }
        };

        let (model_name, model) = or_default("loss-model").expect("loss-model has a default");
        let loss = if model == "bernoulli" {
            bernoulli(probability("loss")?)
        } else if let Some(params) = model.strip_prefix("gilbert:").or_else(|| (model == "gilbert").then_some("")) {
            if let Some((given, _)) = value("loss") {
                return Err(fail(&model_name, format!("gilbert sets its own loss rates (good=, bad=); do not combine it with --{given}")));
            }
            parse_gilbert(params).map_err(|e| fail(&model_name, e))?
        } else {
            return Err(fail(&model_name, format!("{model:?} is not a loss model; accepted: bernoulli, gilbert:p=P,r=R[,good=G,bad=B]")));
        };

        let bandwidth = match (value("rate"), value("trace")) {
            (Some((rate_name, _)), Some((trace_name, _))) => {
                return Err(fail(&trace_name, format!("give either --{rate_name} or --{trace_name}, not both")));
            }
            (Some((given, rate)), None) => Bandwidth::Rate(units::parse_rate(rate).map_err(|e| fail(&given, e))?),
            (None, Some((given, path))) => Bandwidth::Trace(traces.load(&given, path, base)?),
            (None, None) => Bandwidth::Unlimited,
        };
        let queue = match or_default("queue") {
            Some((given, v)) => match units::parse_queue(v).map_err(|e| fail(&given, e))? {
                QueueSize::Unlimited => QueueLimit::Unlimited,
                QueueSize::Bytes(b) => QueueLimit::Bytes(b),
                QueueSize::Packets(p) => QueueLimit::Packets(p),
            },
            None => QueueLimit::Unlimited,
        };
        let choice = |name: &str| or_default(name).map(|(_, v)| v).unwrap_or("");
        let jitter_distribution = match choice("jitter-dist") {
            "normal" => JitterDistribution::Normal,
            _ => JitterDistribution::Uniform,
        };
        let loss_position = match choice("loss-position") {
            "after" => LossPosition::AfterBottleneck,
            _ => LossPosition::BeforeQueue,
        };
        out.push(LinkConfig {
            delay: duration("delay")?,
            jitter: duration("jitter")?,
            jitter_distribution,
            jitter_correlation: probability("jitter-corr")?,
            keep_order,
            loss,
            loss_position,
            duplicate: probability("dup")?,
            corrupt: probability("corrupt")?,
            bandwidth,
            queue,
        });
    }
    let down = out.pop().expect("two directions");
    let up = out.pop().expect("two directions");
    Ok((up, down))
}

/// A change to a link at a given time.
#[derive(Clone, Debug, PartialEq)]
pub enum LinkAction {
    /// Every packet entering during this long is dropped.
    Blackout(Duration),
    /// The bottleneck rate from then on, in bits per second.
    Rate(u64),
    /// Random loss from then on.
    Loss(f64),
    /// One-way delay from then on.
    Delay(Duration),
}

impl LinkAction {
    pub fn describe(&self) -> String {
        match self {
            LinkAction::Blackout(d) => format!("blackout for {:.3} s", d.as_secs_f64()),
            LinkAction::Rate(bps) => format!("rate {:.3} Mbit/s", *bps as f64 / 1e6),
            LinkAction::Loss(p) => format!("loss {:.2} %", p * 100.0),
            LinkAction::Delay(d) => format!("delay {:.3} ms", d.as_millis_f64()),
        }
    }
}

/// Which directions of a link an event changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Directions {
    Up,
    Down,
    Both,
}

impl Directions {
    pub fn includes(self, direction: Direction) -> bool {
        matches!((self, direction), (Directions::Both, _) | (Directions::Up, Direction::Up) | (Directions::Down, Direction::Down))
    }
}

pub fn parse_directions(text: &str) -> Result<Directions, UnitError> {
    match text {
        "up" => Ok(Directions::Up),
        "down" => Ok(Directions::Down),
        "both" | "" => Ok(Directions::Both),
        other => Err(UnitError(format!("{other:?} is not a direction; accepted: up, down, both"))),
    }
}

pub fn parse_action(action: &str, value: &str) -> Result<LinkAction, UnitError> {
    let need = |what: &str| UnitError(format!("{action} needs {what}, like {action}:{}", match action {
        "blackout" | "delay" => "10s",
        "rate" => "5mbit",
        _ => "20%",
    }));
    match action {
        "blackout" if value.is_empty() => Err(need("a duration")),
        "blackout" => {
            let d = units::parse_duration(value)?;
            if d == 0 {
                return Err(UnitError("a blackout lasts more than 0".into()));
            }
            Ok(LinkAction::Blackout(Duration::from_micros(d)))
        }
        "rate" if value.is_empty() => Err(need("a rate")),
        "rate" => Ok(LinkAction::Rate(units::parse_rate(value)?)),
        "loss" if value.is_empty() => Err(need("a probability")),
        "loss" => Ok(LinkAction::Loss(units::parse_probability(value)?)),
        "delay" if value.is_empty() => Err(need("a duration")),
        "delay" => Ok(LinkAction::Delay(Duration::from_micros(units::parse_duration(value)?))),
        other => Err(UnitError(format!("{other:?} is not a link event; accepted: blackout:DURATION, rate:RATE, loss:P, delay:DURATION"))),
    }
}

/// `AT:ACTION[:VALUE][:DIRECTION]`, like `20s:blackout:10s` or `30s:rate:5mbit:up`.
pub fn parse_event(text: &str) -> Result<(Duration, LinkAction, Directions), UnitError> {
    let parts: Vec<&str> = text.split(':').map(str::trim).collect();
    if parts.len() < 2 || parts.len() > 4 {
        return Err(UnitError(format!("{text:?} is not a link event; expected AT:ACTION[:VALUE][:DIRECTION], like 20s:blackout:10s or 30s:rate:5mbit:up")));
    }
    let at = Duration::from_micros(units::parse_duration(parts[0])?);
    let action = parse_action(parts[1], parts.get(2).copied().unwrap_or(""))?;
    let directions = parse_directions(parts.get(3).copied().unwrap_or(""))?;
    Ok((at, action, directions))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(pairs: &[(&str, &str)]) -> Result<(LinkConfig, LinkConfig), OptionError> {
        let get = |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        link_configs(&get, None, &mut TraceCache::default())
    }

    #[test]
    fn per_direction_values_override_the_common_one() {
        let (up, down) = build(&[("loss", "30%"), ("loss-down", "0.1"), ("delay", "5ms"), ("rate-up", "2mbit")]).unwrap();
        assert_eq!((up.loss.clone(), down.loss.clone()), (LossModel::Bernoulli(0.3), LossModel::Bernoulli(0.1)));
        assert_eq!((up.delay, down.delay), (5_000, 5_000));
        assert_eq!((up.bandwidth, down.bandwidth), (Bandwidth::Rate(2_000_000), Bandwidth::Unlimited));
        let (up, _) = build(&[]).unwrap();
        assert_eq!((up.delay, up.queue), (10_000, QueueLimit::Unlimited), "registry defaults");
        let (up, down) = build(&[("loss-model-up", "gilbert:p=1%,r=30%"), ("loss-down", "5%")]).unwrap();
        assert!((up.loss.mean_loss() - 0.01 / 0.31).abs() < 1e-12);
        assert_eq!(down.loss, LossModel::Bernoulli(0.05));
    }

    #[test]
    fn errors_name_the_option_as_given() {
        let e = build(&[("loss-up", "140%")]).unwrap_err();
        assert!(e.to_string().starts_with("--loss-up: "), "{e}");
        let e = build(&[("rate", "2mbit"), ("trace-down", "/x")]).unwrap_err();
        assert_eq!(e.to_string(), "--trace-down: give either --rate or --trace-down, not both");
        let e = build(&[("loss-model", "gilbert:p=1%,r=2%"), ("loss", "3%")]).unwrap_err();
        assert!(e.to_string().starts_with("--loss-model: gilbert sets its own"), "{e}");
        let e = build(&[("trace", "/nonexistent/trace")]).unwrap_err();
        assert!(e.to_string().starts_with("--trace: /nonexistent/trace: cannot read"), "{e}");
    }

    #[test]
    fn events_parse() {
        assert_eq!(parse_event("20s:blackout:10s").unwrap(), (Duration::from_secs(20), LinkAction::Blackout(Duration::from_secs(10)), Directions::Both));
        assert_eq!(parse_event("1.5s:rate:5mbit:up").unwrap().1, LinkAction::Rate(5_000_000));
        assert_eq!(parse_event("0:loss:20%:down").unwrap().2, Directions::Down);
        assert!(parse_event("20s:blackout").unwrap_err().0.contains("needs a duration"));
        assert!(parse_event("20s:melt:1s").unwrap_err().0.contains("accepted: blackout"));
        assert!(parse_event("soon:blackout:1s").is_err());
        assert!(parse_event("1s:rate:5mbit:sideways").unwrap_err().0.contains("up, down, both"));
    }
}
