//! Property test: hundreds of seeded scenarios across loss 0–70 % (Bernoulli and
//! Gilbert–Elliott), jitter that reorders, duplication on the link and by the sender, both profiles and both
//! recovery modes. Every transfer must complete byte-exact, or end in an idle
//! timeout that the loss explains. Never a wrong byte, a panic, or a run past its bound.

use fencepost_sim::{run, Scenario};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const CASES: u64 = 400;

fn pick<'a>(rng: &mut Xoshiro256PlusPlus, options: &[&'a str]) -> &'a str {
    options[(rng.next_u32() as usize) % options.len()]
}

fn unit(rng: &mut Xoshiro256PlusPlus) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[test]
fn transfers_complete_byte_exact_or_time_out_for_cause() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(20261121);
    let (mut completed, mut timed_out) = (0, 0);
    for case in 0..CASES {
        let profile = pick(&mut rng, &["seed", "default"]);
        let arq = pick(&mut rng, &["fence", "window"]);
        let loss = (unit(&mut rng) * 0.70 * 100.0).round() / 100.0;
        let bursty = rng.next_u32() % 3 == 0;
        let loss_model = if bursty {
            // Mean loss `loss` with bursts: bad state loses 90 %, good state loses a tenth of `loss`.
            let (good, bad) = (loss / 10.0, 0.9);
            let r = 0.25;
            let p = if loss <= good { 0.0001 } else { r * (loss - good) / (bad - loss).max(0.01) };
            format!("gilbert:p={:.4},r={r},good={good:.4},bad={bad}", p.min(1.0))
        } else {
            "bernoulli".to_string()
        };
        let delay = format!("{}ms", 1 + rng.next_u32() % 30);
        let jitter = format!("{}ms", rng.next_u32() % 15);
        let dup = format!("{}%", rng.next_u32() % 21);
        let workload = pick(&mut rng, &["bulk", "echo"]);
        let bytes = format!("{}", 2_000 + rng.next_u32() % 60_000);
        let messages = format!("{}", 5 + rng.next_u32() % 40);
        let seed = format!("{case}");
        let loss_text = format!("{loss}");
        let redundancy = pick(&mut rng, &["none", "none", "dup:25%", "dup:100%", "fec:rs:8/12", "fec:window:16/4", "fec:adaptive"]);
        let mut options = vec![
            ("profile", profile),
            ("arq", arq),
            ("workload", workload),
            ("bytes", bytes.as_str()),
            ("messages", messages.as_str()),
            ("delay", delay.as_str()),
            ("jitter", jitter.as_str()),
            ("dup", dup.as_str()),
            ("redundancy", redundancy),
            ("seed", seed.as_str()),
            ("timeout", "900s"),
            ("loss-model", loss_model.as_str()),
        ];
        if !bursty {
            options.push(("loss", loss_text.as_str()));
        }
        let scenario = Scenario::from_options(options.iter().copied()).expect("generated options are valid");
        let idle = scenario.flows()[0].transport.idle_timeout.as_secs_f64();
        let mean_loss = scenario.topology.links[0].up.loss.mean_loss();
        let report = run(scenario);
        let context = format!("case {case}: {options:?} -> {}", report.to_json());

        assert_eq!(report.wrong_bytes, 0, "wrong data delivered: {context}");
        assert!(report.end_s <= 900.0, "ran past its bound: {context}");
        match report.status.as_str() {
            "ok" => {
                assert!(report.integrity_ok && report.close_ok, "{context}");
                assert_eq!(report.bytes_delivered, report.bytes_expected, "{context}");
                completed += 1;
            }
            "timeout" => {
                let silence = report.timeout_silence_s.expect("a timeout reports the silence");
                assert!(silence + 1e-6 >= idle, "idle timeout fired after only {silence} s of silence: {context}");
                assert!(mean_loss >= 0.25, "an idle timeout at {mean_loss} mean loss is not explained by loss: {context}");
                assert!(report.bytes_delivered <= report.bytes_expected || report.bytes_expected == 0, "{context}");
                timed_out += 1;
            }
            other => panic!("status {other}: {context}"),
        }
    }
    println!("{completed} completed, {timed_out} ended in an idle timeout, of {CASES}");
    assert!(completed as f64 >= CASES as f64 * 0.6, "most transfers should complete: {completed} of {CASES}");
}
