//! fencepost-sim: hosts joined by modelled links and flows of fencepost
//! connections between them, run in virtual time. The clock jumps from one
//! deadline to the next and never sleeps; one seed drives every random choice,
//! so the same scenario gives the same result bit for bit. Scenarios and
//! reports are specified by `fencepost-spec`.

mod apps;
pub mod digest;
pub mod events;
mod pattern;
pub mod world;

pub use fencepost_spec::{OptionError, RunReport, Scenario, Workload};
pub use world::{run, OneThread, Parallelism, Role, Simulation, TraceSink};
