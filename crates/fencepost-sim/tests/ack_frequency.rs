//! A data sender asks its peer for fewer acks once its controller has found the path's
//! rate, or earlier when it sends fast; while the controller still grows from below, acks
//! come as before.

use fencepost_sim::{run, Scenario};

fn data_packets_per_ack(options: &[(&str, &str)]) -> f64 {
    let report = run(Scenario::from_options(options.iter().copied().chain([("queue", "2MB"), ("seed", "3")])).unwrap());
    assert!(report.integrity_ok, "{}", report.to_json());
    report.data_packets_sent as f64 / report.peer_acks_sent.max(1) as f64
}

#[test]
fn a_fast_flow_is_acked_less_often_and_a_starting_one_as_before() {
    // 1 Gbit/s over 10 ms: about 850 packets in flight, far past 50,000 a second, so the
    // sender asks for an ack per 16 (an eighth of the flight, at most 16).
    // (The start, while the flight grows, has more: 5.7 per ack over 10 MB, 14.3 over 300 MB.)
    let fast = data_packets_per_ack(&[("bytes", "100MB"), ("rate", "1gbit"), ("delay", "5ms"), ("loss", "0")]);
    assert!(fast > 10.0, "{fast:.1} data packets per ack at 1 Gbit/s");
    // Losses are acked at once, asked or not: more acks, but still fewer than one per two.
    let lossy = data_packets_per_ack(&[("bytes", "100MB"), ("rate", "1gbit"), ("delay", "5ms"), ("loss", "1%")]);
    assert!(lossy > 2.5 && lossy < fast, "{lossy:.1} data packets per ack at 1 Gbit/s, 1 % loss");
    // 1 MB over 100 Mbit/s, 40 ms: the whole transfer is Startup, below 50,000 packets a
    // second: an ack per two packets, each growing the window.
    let starting = data_packets_per_ack(&[("bytes", "1MB"), ("rate", "100mbit"), ("delay", "20ms"), ("loss", "0")]);
    assert!((1.5..2.5).contains(&starting), "{starting:.1} data packets per ack in Startup");
    // 5 MB over 20 Mbit/s, 40 ms: Startup, then an eighth of about 70 packets in flight.
    let found = data_packets_per_ack(&[("bytes", "5MB"), ("rate", "20mbit"), ("delay", "20ms"), ("loss", "0")]);
    assert!(found > 3.5, "{found:.1} data packets per ack at 20 Mbit/s once the rate is found");
}

/// The acks' own path may be the narrow one: at 100 Mbit/s an ack per two data packets
/// takes 2.4 Mbit/s back (4,200 acks of 72 bytes a second, IP and UDP headers included).
/// Through 512 kbit/s the acks set the rate (20 Mbit/s for `tolerant` and `bbr`, 24 for
/// CUBIC); asking for an ack per eighth of the flight once out of Startup frees it.
#[test]
fn a_narrow_return_path_does_not_set_the_rate() {
    for cc in ["tolerant", "bbr", "cubic"] {
        let options = [("bytes", "100MB"), ("rate-up", "100mbit"), ("rate-down", "512kbit"), ("delay", "20ms"), ("queue", "1MB"), ("cc", cc), ("seed", "1")];
        let report = run(Scenario::from_options(options).unwrap());
        assert!(report.integrity_ok && report.status == "ok", "{cc}: {}", report.to_json());
        let flow = &report.flows[0];
        assert!(flow.goodput_bps >= 60e6, "{cc}: {:.1} Mbit/s", flow.goodput_bps / 1e6);
    }
}
