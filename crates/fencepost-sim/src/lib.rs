//! fencepost-sim: fencepost endpoints joined by modelled links, run in virtual
//! time. The clock jumps from one deadline to the next and never sleeps; one
//! seed drives every random choice, so the same scenario gives the same result
//! bit for bit.

pub mod digest;
pub mod events;
mod pattern;
pub mod report;
pub mod scenario;
pub mod units;
pub mod world;

pub use report::SimReport;
pub use scenario::{OptionError, Scenario, Workload};
pub use world::{run, Direction, Role, Simulation, TraceSink};
