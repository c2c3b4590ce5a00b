//! Simulator speed: virtual seconds simulated per wall-clock second for a 100 MB
//! bulk transfer over 100 Mbit/s, 20 ms one-way delay, 1 % loss each way.
//! Run with `bash bench/sim_speed.sh` (release build).

use fencepost_sim::{run, Scenario};
use std::time::Instant;

fn main() {
    let bytes = std::env::args().nth(1).unwrap_or_else(|| "100MB".to_string());
    println!("scenario: bulk {bytes}, rate 100mbit, delay 20ms, loss 1% both ways, queue 1MB, seed 1");
    println!("{:<34} {:>10} {:>10} {:>12} {:>14} {:>10}", "cc", "virtual s", "wall s", "sim x real", "datagrams/s", "integrity");
    // A window that fills the 100 Mbit/s x 40 ms path, the default profile's, and the loss-based controllers.
    for cc in ["none:window=512", "none:window=64", "tahoe", "reno", "cubic", "bbr", "tolerant"] {
        let options = [
            ("bytes", bytes.as_str()),
            ("rate", "100mbit"),
            ("delay", "20ms"),
            ("loss", "1%"),
            ("queue", "1MB"),
            ("cc", cc),
            ("seed", "1"),
        ];
        let scenario = Scenario::from_options(options).expect("bench options are valid");
        let started = Instant::now();
        let report = run(scenario);
        let wall = started.elapsed().as_secs_f64();
        let datagrams = report.link_up.offered + report.link_down.offered;
        println!(
            "{:<34} {:>10.2} {:>10.3} {:>12.1} {:>14.0} {:>10}",
            report.cc,
            report.end_s,
            wall,
            report.end_s / wall,
            datagrams as f64 / wall,
            report.integrity_ok
        );
        if !report.integrity_ok {
            eprintln!("run failed: {}", report.to_json());
            std::process::exit(1);
        }
    }
}
