//! The link model against the numbers it must reproduce: mahimahi trace rates,
//! trace repetition, and the Gilbert–Elliott long-run loss rate.

use fencepost_link::{Bandwidth, Link, LinkConfig, LossModel, QueueLimit, Trace};
use std::path::PathBuf;
use std::sync::Arc;

fn shared_trace(name: &str) -> Option<Trace> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces").join(name);
    if !path.exists() {
        eprintln!("skipping: {} not found (the shared traces live beside the project)", path.display());
        return None;
    }
    Some(Trace::from_file(&path).expect("shared trace parses"))
}

/// Keeps the link saturated with `size`-byte packets for `seconds` and returns
/// the delivered rate in bits per second, measured over deliveries after the first second.
fn saturated_rate(trace: Trace, size: usize, seconds: u64) -> f64 {
    let config = LinkConfig { bandwidth: Bandwidth::Trace(Arc::new(trace)), queue: QueueLimit::Unlimited, ..Default::default() };
    let mut link: Link<()> = Link::new(config, 1, 0);
    let end = seconds * 1_000_000;
    let (mut bytes, mut first, mut last) = (0u64, None, 0u64);
    let mut now = 0;
    while now < end {
        // Top the queue up every millisecond so that no opportunity goes unused.
        while link.queue_len() < 64 {
            link.enqueue(now, (), size);
        }
        now += 1000;
        while let Some(t) = link.poll_timeout().filter(|&t| t <= now) {
            while link.poll_deliver(t).is_some() {
                if t >= 1_000_000 {
                    first.get_or_insert(t);
                    bytes += size as u64;
                    last = t;
                }
            }
        }
    }
    bytes as f64 * 8.0 / ((last - first.unwrap()) as f64 / 1e6)
}

#[test]
fn twelve_mbit_trace_carries_its_rate_in_mtu_packets() {
    for (source, trace) in [("generated `1`", Some(Trace::parse("1\n").unwrap())), ("shared 12mbps.trace", shared_trace("12mbps.trace"))] {
        let Some(trace) = trace else { continue };
        let rate = saturated_rate(trace, 1500, 20);
        let error = (rate - 12.032e6).abs() / 12.032e6;
        println!("{source}: {:.3} Mbit/s", rate / 1e6);
        assert!(error < 0.01, "{source}: {rate} bit/s is {:.2}% off 12.03 Mbit/s", error * 100.0);
    }
}

#[test]
fn trace_repeats_shifted_by_its_last_time() {
    // 10 opportunities in the first 10 ms of a 100 ms trace: bursts every 100 ms.
    let text: String = (1..=10).map(|t| format!("{t}\n")).chain(std::iter::once("100\n".to_string())).collect();
    let config = LinkConfig { bandwidth: Bandwidth::Trace(Arc::new(Trace::parse(&text).unwrap())), ..Default::default() };
    let mut link: Link<u32> = Link::new(config, 1, 0);
    for i in 0..40 {
        link.enqueue(0, i, 1504);
    }
    let mut times = Vec::new();
    while let Some(t) = link.poll_timeout() {
        while link.poll_deliver(t).is_some() {
            times.push(t / 1000);
        }
    }
    // 11 opportunities per period (1..=10 and 100): repetition k starts at 100k ms.
    let expected: Vec<u64> = (0..4u64).flat_map(|k| (1..=10).chain([100]).map(move |t| 100 * k + t)).take(40).collect();
    assert_eq!(times, expected);
}

#[test]
fn gilbert_elliott_long_run_loss_matches_its_parameters() {
    for (p, r, loss_good, loss_bad) in [(0.01, 0.3, 0.0, 1.0), (0.05, 0.2, 0.02, 0.6), (0.2, 0.2, 0.1, 0.9)] {
        let model = LossModel::GilbertElliott { p, r, loss_good, loss_bad };
        let expected = model.mean_loss();
        let mut link: Link<()> = Link::new(LinkConfig { loss: model, ..Default::default() }, 11, 0);
        let n = 2_000_000u64;
        for i in 0..n {
            link.enqueue(i, (), 100);
            while link.poll_deliver(i).is_some() {}
        }
        let measured = link.stats().lost as f64 / n as f64;
        println!("GE p={p} r={r} good={loss_good} bad={loss_bad}: expected {expected:.4}, measured {measured:.4}");
        assert!((measured - expected).abs() / expected < 0.02, "measured {measured}, expected {expected}");
    }
}
