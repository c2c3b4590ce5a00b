//! The link model against the numbers it must reproduce: mahimahi trace rates,
//! trace repetition, and the Gilbert–Elliott long-run loss rate.

use fencepost_link::{Bandwidth, Link, LinkConfig, LossModel, QueueLimit, Trace};
use std::path::PathBuf;
use std::sync::Arc;

/// A mahimahi trace the project ships (python/fencepost/traces).
fn shipped_trace(name: &str) -> Trace {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/fencepost/traces").join(name);
    Trace::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
    for (source, trace) in [("generated `1`", Trace::parse("1\n").unwrap()), ("shipped 12mbps.trace", shipped_trace("12mbps.trace"))] {
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

/// Delivers everything a saturated 10 Mbit/s link carries in 10 s; returns (delivered, corrupted) counts.
fn saturated_counts(config: LinkConfig) -> (u64, u64) {
    let mut link: Link<()> = Link::new(LinkConfig { bandwidth: Bandwidth::Rate(10_000_000), queue: QueueLimit::Packets(50), ..config }, 5, 0);
    let mut now = 0;
    while now < 10_000_000 {
        while link.queue_len() < 20 {
            link.enqueue(now, (), 1250);
        }
        now += 1000;
        while let Some(t) = link.poll_timeout().filter(|&t| t <= now) {
            while link.poll_delivery(t).is_some() {}
        }
    }
    (link.stats().delivered, link.stats().corrupted)
}

#[test]
fn loss_after_the_bottleneck_spends_capacity_and_loss_before_it_does_not() {
    use fencepost_link::LossPosition;
    // 10 Mbit/s of 1250-byte packets: 1000 a second.
    let (before, _) = saturated_counts(LinkConfig { loss: LossModel::Bernoulli(0.3), ..Default::default() });
    let (after, _) = saturated_counts(LinkConfig { loss: LossModel::Bernoulli(0.3), loss_position: LossPosition::AfterBottleneck, ..Default::default() });
    assert!((9_900..=10_000).contains(&before), "a packet lost on entry leaves its slot to the next: {before}");
    assert!((6_700..=7_300).contains(&after), "a packet lost after the bottleneck used its slot: {after}");
}

#[test]
fn corruption_marks_the_share_it_is_given() {
    let (delivered, corrupted) = saturated_counts(LinkConfig { corrupt: 0.05, ..Default::default() });
    let share = corrupted as f64 / delivered as f64;
    assert!((0.04..0.06).contains(&share), "{share}");
    let (_, none) = saturated_counts(LinkConfig::default());
    assert_eq!(none, 0);
}

/// The delay variation of `n` packets sent 10 ms apart on an unlimited link.
fn variations(config: LinkConfig, n: u64) -> Vec<f64> {
    let delay = 50_000;
    let mut link: Link<u64> = Link::new(LinkConfig { delay, ..config }, 9, 0);
    let mut out = Vec::new();
    for i in 0..n {
        link.enqueue(i * 10_000, i, 100);
    }
    while let Some(t) = link.poll_timeout() {
        while let Some(d) = link.poll_delivery(t) {
            out.push((d.due as f64 - (d.packet * 10_000) as f64 - delay as f64, d.packet));
        }
    }
    out.sort_by_key(|&(_, i)| i);
    out.into_iter().map(|(v, _)| v).collect()
}

#[test]
fn normal_jitter_has_its_standard_deviation_and_correlation_carries_over() {
    use fencepost_link::JitterDistribution;
    let normal = LinkConfig { jitter: 5_000, jitter_distribution: JitterDistribution::Normal, ..Default::default() };
    let v = variations(normal.clone(), 20_000);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
    assert!(mean.abs() < 150.0 && (4_800.0..5_200.0).contains(&sd), "mean {mean} sd {sd}");
    let lag1 = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let num: f64 = v.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum();
        let den: f64 = v.iter().map(|x| (x - m).powi(2)).sum();
        num / den
    };
    assert!(lag1(&v).abs() < 0.03, "independent draws: {}", lag1(&v));
    let correlated = variations(LinkConfig { jitter_correlation: 0.6, ..normal }, 20_000);
    assert!((0.55..0.65).contains(&lag1(&correlated)), "{}", lag1(&correlated));
    let uniform = variations(LinkConfig { jitter: 5_000, ..Default::default() }, 20_000);
    assert!(uniform.iter().all(|x| x.abs() <= 5_000.0) && uniform.iter().any(|x| *x > 4_500.0));
}
