//! Simulator speed: virtual seconds simulated per wall-clock second for a 100 MB
//! bulk transfer over 100 Mbit/s, 20 ms one-way delay, 1 % loss each way.
//! Run with `bash bench/sim_speed.sh` (release build). `mode=` says how each run steps
//! through time, one or more of (comma-separated): `windows` (the default: the clients'
//! and the servers' sides take turns in windows on one thread), `threads` (those windows
//! on two threads, `Simulation::parallel`; `parallel=true` says the same) and `instants`
//! (every instant through both sides, `Simulation::windows(false)`); the last column says
//! how much of the simulated time ran in windows. All give the same report. `reps=N`
//! (default 3) runs each N times, the modes interleaved: a 100 MB run takes well under a
//! tenth of a second, and one timing on a shared host is a draw, so the median is printed
//! with the slowest and fastest beside it.

use fencepost_sim::{Scenario, Simulation};
use std::time::Instant;

fn main() {
    let bytes = std::env::args().nth(1).unwrap_or_else(|| "100MB".to_string());
    // Further arguments are scenario options, name=value, for every run (e.g. insecure=true); they
    // replace the bench's own of the same name.
    let mut extra: Vec<(String, String)> = std::env::args()
        .skip(2)
        .map(|arg| match arg.split_once('=') {
            Some((name, value)) => (name.to_string(), value.to_string()),
            None => {
                eprintln!("sim_speed: {arg:?} is not an option; accepted form: name=value (e.g. insecure=true)");
                std::process::exit(2)
            }
        })
        .collect();
    println!("scenario: bulk {bytes}, rate 100mbit, delay 20ms, loss 1% both ways, queue 1MB, seed 1");
    let reps = match extra.iter().position(|(name, _)| name == "reps").map(|i| extra.remove(i).1) {
        None => 3,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                eprintln!("sim_speed: reps={v:?}: accepted form: reps=N, a whole number of runs, at least 1");
                std::process::exit(2)
            }
        },
    };
    println!(
        "{:<34} {:>10} {:>10} {:>12} {:>15} {:>14} {:>10} {:>8}",
        "cc", "virtual s", "wall s", "sim x real", "(min-max)", "datagrams/s", "integrity", "windows"
    );
    // A window that fills the 100 Mbit/s x 40 ms path, the default profile's, and the loss-based
    // controllers; or only the controller given as cc=SPEC.
    // `mode=` and `parallel=` say how the simulator runs, not what it simulates.
    let mut modes = match extra.iter().position(|(name, _)| name == "mode").map(|i| extra.remove(i).1) {
        None => vec![Mode::Windows],
        Some(list) => list
            .split(',')
            .map(|m| match m {
                "windows" => Mode::Windows,
                "threads" => Mode::Threads,
                "instants" => Mode::Instants,
                _ => {
                    eprintln!("sim_speed: mode={list:?}: accepted form: mode=windows, threads or instants, or several comma-separated");
                    std::process::exit(2)
                }
            })
            .collect(),
    };
    match extra.iter().position(|(name, _)| name == "parallel").map(|i| extra.remove(i).1) {
        None => {}
        Some(v) if v == "true" => modes = vec![Mode::Threads],
        Some(v) if v == "false" => {}
        Some(v) => {
            eprintln!("sim_speed: parallel={v:?}: accepted form: parallel=true or parallel=false");
            std::process::exit(2)
        }
    }
    let given_cc = extra.iter().position(|(name, _)| name == "cc").map(|i| extra.remove(i).1);
    let controllers = match &given_cc {
        Some(cc) => vec![cc.as_str()],
        None => vec!["none:window=512", "none:window=64", "tahoe", "reno", "cubic", "bbr", "tolerant"],
    };
    for cc in controllers {
        let mut options = vec![
            ("bytes", bytes.as_str()),
            ("rate", "100mbit"),
            ("delay", "20ms"),
            ("loss", "1%"),
            ("queue", "1MB"),
            ("cc", cc),
            ("seed", "1"),
        ];
        // A given option replaces the bench's own (seed=2, loss=5%, ...).
        options.retain(|(name, _)| !extra.iter().any(|(given, _)| given == name));
        options.extend(extra.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let scenario = match Scenario::from_options(options) {
            Ok(scenario) => scenario,
            Err(e) => {
                eprintln!("sim_speed: {e}");
                std::process::exit(2)
            }
        };
        // Every repetition is the same run (same seed, same report); only its time differs.
        // The modes take turns, so that a slow spell of the host falls on each alike.
        let mut walls = vec![Vec::with_capacity(reps); modes.len()];
        let mut last = vec![None; modes.len()];
        for _ in 0..reps {
            for (m, mode) in modes.iter().enumerate() {
                let sim = Simulation::new(scenario.clone());
                let sim = match mode {
                    Mode::Windows => sim,
                    Mode::Threads => sim.parallel(true),
                    Mode::Instants => sim.windows(false),
                };
                let started = Instant::now();
                let (report, apart) = sim.run_timed_apart();
                walls[m].push(started.elapsed().as_secs_f64());
                if !report.integrity_ok {
                    eprintln!("run failed: {}", report.to_json());
                    std::process::exit(1);
                }
                last[m] = Some((report, apart));
            }
        }
        for ((mode, walls), last) in modes.iter().zip(&mut walls).zip(last) {
            let (report, apart) = last.expect("at least one repetition");
            walls.sort_by(f64::total_cmp);
            let wall = walls[walls.len() / 2];
            let datagrams = report.link_up.offered + report.link_down.offered;
            let range = format!("{:.0}-{:.0}", report.end_s / walls[walls.len() - 1], report.end_s / walls[0]);
            let name = match mode {
                Mode::Windows => report.cc.clone(),
                Mode::Threads => format!("{} (threads)", report.cc),
                Mode::Instants => format!("{} (instants)", report.cc),
            };
            println!(
                "{:<34} {:>10.2} {:>10.3} {:>12.1} {:>15} {:>14.0} {:>10} {:>7.0}%",
                name,
                report.end_s,
                wall,
                report.end_s / wall,
                range,
                datagrams as f64 / wall,
                report.integrity_ok,
                100.0 * apart.as_secs_f64() / report.end_s
            );
        }
    }
}

/// How a run steps through simulated time.
#[derive(Clone, Copy)]
enum Mode {
    Windows,
    Threads,
    Instants,
}
