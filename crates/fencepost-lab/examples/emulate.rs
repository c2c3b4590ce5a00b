//! A bare emulator for trying the lab by hand: `emulate UP_IN DOWN_IN DELAY_US LOSS`.
use fencepost_lab::emulator::{run, EmulatorSpec};
use fencepost_link::{LinkConfig, LossModel};
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let delay: u64 = args[3].parse().unwrap();
    let loss: f64 = args[4].parse().unwrap();
    let config = LinkConfig { delay, loss: if loss > 0.0 { LossModel::Bernoulli(loss) } else { LossModel::None }, ..Default::default() };
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as usize);
        libc::signal(libc::SIGTERM, on_signal as *const () as usize);
    }
    let spec = EmulatorSpec { up_in: args[1].clone(), down_in: args[2].clone(), up: config.clone(), down: config, seed: 1, log: None, socket_buffer: 16 << 20 };
    let report = run(spec, &STOP, || ()).unwrap();
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
