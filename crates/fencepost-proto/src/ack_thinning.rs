//! Asking for sparser acks when the acks' own path is the narrow one.
//!
//! A data sender's acks come back over the return path. When that path is far narrower
//! than the forward one (a satellite or cellular uplink, ADSL), the acks queue on it,
//! arrive at its pace, and each frees only the few packets it acknowledges: the ack
//! clock, not the forward path, sets the rate, and a model-based controller measures
//! that pace as the path's bandwidth (20 Mbit/s out with 64 kbit/s back gave 1.4 Mbit/s).
//!
//! Nothing the sender sees tells a queue of acks on the way back from a queue of data on
//! the way out: both raise the RTT while the flight stays the same. What tells them apart
//! is what happens when acks get sparser. Through a narrow return path the acks keep
//! arriving at its pace, each covering more packets, so the delivery rate rises, or the
//! queue of acks drains and the RTT falls back at the same rate; through a narrow forward
//! path fewer acks arrive, each covering more, and neither the rate nor the queue moves.
//! So the sender tries: after two rounds that show a queue, no loss and acks to spare, with
//! a controller whose rate comes from a settled model of the path (see
//! `Controller::rate_model_settled`), it asks for acks half as often, and keeps that if
//! the delivery rate rises by half or the queue shrinks to a quarter within a few rounds;
//! otherwise it goes back and waits longer (doubling) before it tries again. A level kept is tried one step down now and then,
//! and given up when the queue does not come back and the rate holds: paths change, and a
//! lucky trial should not thin a connection's acks for good.

use crate::time::{Duration, Instant};

/// At most 2^3 times fewer acks than the ordinary rule asks for (the connection also keeps
/// at least two acks per flight).
pub const MAX_LEVEL: u32 = 3;
/// Rounds a trial lasts before it is judged.
const TRIAL_ROUNDS: u32 = 4;
/// A trial is kept when the delivery rate rose by this factor: more than a bandwidth probe's
/// own 1.25 gain, which a controller may apply in the same rounds.
const KEEP_GAIN: f64 = 1.5;
/// ... or when, in two of its rounds, the queue fell to a quarter of what it was while the
/// rate kept this share of what it was. A round after the first that delivers less than
/// that ends a trial at once: a flow whose window binds (BBR's, behind a deep queue shared
/// with others) sends less while its acks are held, and two `tolerant` flows through 500 kB
/// at 100 Mbit/s shared 38:62 while one of them kept trying.
const KEEP_RATE: f64 = 0.8;
const QUEUE_DRAINED_SHARE: u64 = 4;
/// A round shows a queue when its smallest RTT exceeds the path's by an eighth, 1 ms and
/// half the RTT's variation (see `Round::shows_queue`).
const QUEUE_SHARE: u64 = 8;
const QUEUE_FLOOR: Duration = Duration::from_millis(1);
/// A round with fewer acks than this has too few to thin (the connection keeps two per flight).
const MIN_ACKS_PER_ROUND: u32 = 8;
/// Rounds to wait after the first failed trial; doubled by each further failure, up to
/// [`MAX_WAIT_ROUNDS`].
const FIRST_WAIT_ROUNDS: u32 = 8;
const MAX_WAIT_ROUNDS: u32 = 256;
/// Rounds a level is held before it is tried one step down.
const HOLD_ROUNDS: u32 = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Sparser acks: kept on proof of a gain.
    Sparser,
    /// Denser acks again: kept unless the queue or the rate says the acks were the limit.
    Denser,
}

#[derive(Clone, Copy, Debug)]
struct Trial {
    direction: Direction,
    /// The level before the trial.
    from: u32,
    /// The best delivery rate (bytes per second) and the smaller queue of the two rounds before it.
    rate_before: f64,
    queue_before: Duration,
    /// The best delivery rate seen during it.
    best: f64,
    /// Its rounds whose queue drained with the rate kept, and those that showed a queue.
    drained_rounds: u32,
    queued_rounds: u32,
    rounds_left: u32,
}

/// What one round (about one smoothed RTT) of acks showed.
#[derive(Clone, Copy, Debug)]
struct Round {
    start: Instant,
    acks: u32,
    /// Best delivery rate of samples taken while the sender was not held back by its application.
    best_rate: f64,
    least_rtt: Duration,
    lost: bool,
    app_limited: bool,
    /// The controller's model was settled throughout.
    eligible: bool,
}

impl Round {
    fn new(start: Instant) -> Round {
        Round { start, acks: 0, best_rate: 0.0, least_rtt: Duration::MAX, lost: false, app_limited: false, eligible: true }
    }

    /// How far its smallest RTT sits above the path's, if it saw one.
    fn queue(&self, min_rtt: Duration) -> Option<Duration> {
        (self.least_rtt != Duration::MAX).then(|| self.least_rtt.saturating_sub(min_rtt))
    }

    /// Its smallest RTT exceeds the path's by an eighth, 1 ms and half the RTT's variation
    /// (jitter alone keeps a round's smallest RTT above the least ever seen; the whole
    /// variation hid a real queue of acks at 128 kbit/s back): something queues.
    fn shows_queue(&self, path: &PathRtt) -> bool {
        self.queue(path.min).is_some_and(|q| q > (path.min / QUEUE_SHARE).max(QUEUE_FLOOR).max(path.variation / 2))
    }

    /// A round worth thinning the acks after: a queue, acks to spare, no loss, a rate
    /// measured while the application kept the sender busy, and a controller whose model
    /// was settled throughout (the queue a Startup overshoots by is drained by the
    /// controller next; taken for a queue of acks drained by a trial, it made sparser acks
    /// look useful: at 1 Gbit/s x 10 ms the levels climbed one per Startup).
    fn invites_thinning(&self, path: &PathRtt) -> bool {
        self.eligible && self.shows_queue(path) && !self.lost && !self.app_limited && self.acks >= MIN_ACKS_PER_ROUND && self.best_rate > 0.0
    }
}

/// The path's least RTT and the RTT's variation (RFC 6298's RTTVAR).
#[derive(Clone, Copy, Debug)]
struct PathRtt {
    min: Duration,
    variation: Duration,
}

/// What became of sparser acks at the end of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sparser {
    /// A trial began: acks are asked for half as often.
    Tried,
    /// A trial was kept: sparser acks proved to carry more.
    Kept,
}

/// One ack's worth of what [`AckThinning`] watches.
#[derive(Clone, Copy, Debug)]
pub struct AckObservation {
    pub now: Instant,
    pub smoothed_rtt: Duration,
    /// The least RTT seen on the connection (the path without queues), and the RTT's variation.
    pub min_rtt: Duration,
    pub rtt_variation: Duration,
    /// This ack's RTT sample, if it gave one.
    pub rtt_sample: Option<Duration>,
    /// The delivery rate sample it gave (bytes per second), if any, and whether it was
    /// taken while the application limited sending.
    pub delivery_rate: Option<(f64, bool)>,
    /// Packets were declared lost on this ack.
    pub lost: bool,
    /// The controller's rate comes from a settled model of the path
    /// (`Controller::rate_model_settled`): others are left alone.
    pub eligible: bool,
}

/// The data sender's state for thinning its peer's acks (see the module's comment).
#[derive(Clone, Debug, Default)]
pub struct AckThinning {
    level: u32,
    round: Option<Round>,
    /// The last finished round.
    previous: Option<Round>,
    trial: Option<Trial>,
    /// Rounds before a trial of sparser acks may start.
    wait_rounds: u32,
    /// Rounds before the level is tried one step down.
    hold_rounds: u32,
    failures: u32,
}

impl AckThinning {
    /// Acks are asked for 2^level times less often than the ordinary rule would.
    pub fn level(&self) -> u32 {
        self.level
    }

    /// Takes in one ack; says when a trial of sparser acks began or was kept.
    pub fn on_ack(&mut self, ack: &AckObservation) -> Option<Sparser> {
        let round = self.round.get_or_insert_with(|| Round::new(ack.now));
        round.acks += 1;
        if let Some(rtt) = ack.rtt_sample {
            round.least_rtt = round.least_rtt.min(rtt);
        }
        match ack.delivery_rate {
            Some((_, true)) => round.app_limited = true,
            Some((rate, false)) => round.best_rate = round.best_rate.max(rate),
            None => {}
        }
        round.lost |= ack.lost;
        round.eligible &= ack.eligible;
        if ack.now.saturating_duration_since(round.start) < ack.smoothed_rtt {
            return None;
        }
        let finished = *round;
        self.round = Some(Round::new(ack.now));
        let outcome = self.end_round(&finished, ack);
        self.previous = Some(finished);
        outcome
    }

    fn end_round(&mut self, round: &Round, ack: &AckObservation) -> Option<Sparser> {
        let min_rtt = ack.min_rtt;
        let path = PathRtt { min: ack.min_rtt, variation: ack.rtt_variation };
        if let Some(mut trial) = self.trial.take() {
            trial.best = trial.best.max(round.best_rate);
            trial.rounds_left -= 1;
            let rate_kept = round.best_rate >= KEEP_RATE * trial.rate_before;
            if round.shows_queue(&path) {
                trial.queued_rounds += 1;
            }
            let drained = round.queue(min_rtt).is_some_and(|q| q <= trial.queue_before / QUEUE_DRAINED_SHARE);
            if drained && rate_kept && !round.lost {
                trial.drained_rounds += 1;
            }
            match trial.direction {
                Direction::Sparser => {
                    if trial.best >= KEEP_GAIN * trial.rate_before || trial.drained_rounds >= 2 {
                        // Sparser acks let more through, or drained the queue at no cost in
                        // rate (fewer acks do not shorten a queue of data): keep them, and
                        // the next round may try sparser still.
                        self.failures = 0;
                        self.hold_rounds = HOLD_ROUNDS;
                        return Some(Sparser::Kept);
                    } else if trial.rounds_left == 0 || !ack.eligible || (trial.rounds_left < TRIAL_ROUNDS - 1 && !rate_kept) {
                        self.level = trial.from;
                        self.failures += 1;
                        self.wait_rounds = (FIRST_WAIT_ROUNDS << (self.failures - 1).min(16)).min(MAX_WAIT_ROUNDS);
                    } else {
                        self.trial = Some(trial);
                    }
                }
                Direction::Denser => {
                    // The first round may still carry the sparser acks' effect; after it, a
                    // queue in two rounds or a fallen rate says the acks were the limit.
                    let fell = trial.rounds_left < TRIAL_ROUNDS - 1 && !rate_kept;
                    if trial.queued_rounds >= 2 || fell {
                        self.level = trial.from;
                        self.hold_rounds = HOLD_ROUNDS;
                    } else if trial.rounds_left > 0 && ack.eligible {
                        self.trial = Some(trial);
                    } else {
                        // Denser acks cost nothing: the path no longer needs them sparse.
                        self.hold_rounds = HOLD_ROUNDS;
                    }
                }
            }
            return None;
        }
        self.wait_rounds = self.wait_rounds.saturating_sub(1);
        self.hold_rounds = self.hold_rounds.saturating_sub(1);
        if !ack.eligible {
            return None;
        }
        let previous = self.previous.filter(|p| p.invites_thinning(&path));
        if let Some(previous) = previous.filter(|_| round.invites_thinning(&path) && self.wait_rounds == 0 && self.level < MAX_LEVEL) {
            self.trial = Some(self.trial_from(Direction::Sparser, round, &previous, min_rtt));
            self.level += 1;
            return Some(Sparser::Tried);
        }
        if self.level > 0 && self.hold_rounds == 0 {
            let previous = self.previous.unwrap_or(*round);
            self.trial = Some(self.trial_from(Direction::Denser, round, &previous, min_rtt));
            self.level -= 1;
        }
        None
    }

    fn trial_from(&self, direction: Direction, round: &Round, previous: &Round, min_rtt: Duration) -> Trial {
        let queue = |r: &Round| r.queue(min_rtt).unwrap_or(Duration::ZERO);
        Trial {
            direction,
            from: self.level,
            rate_before: round.best_rate.max(previous.best_rate),
            queue_before: queue(round).min(queue(previous)),
            best: 0.0,
            drained_rounds: 0,
            queued_rounds: 0,
            rounds_left: TRIAL_ROUNDS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN_RTT: Duration = Duration::from_millis(40);

    /// A sender and its clock.
    #[derive(Default)]
    struct Sender {
        thinning: AckThinning,
        now: Instant,
    }

    /// A path whose RTT and delivery rate follow `path(level)`: rounds of `acks` acks, one
    /// RTT each, each ack carrying the round's rate and RTT. Returns the level after `rounds`.
    fn run(sender: &mut Sender, rounds: u32, acks: u32, path: impl Fn(u32) -> (Duration, f64)) -> u32 {
        let Sender { thinning, now } = sender;
        for _ in 0..rounds {
            let (rtt, rate) = path(thinning.level());
            for i in 0..acks {
                let at = *now + Duration::from_micros(rtt.total_micros() * u64::from(i) / u64::from(acks));
                thinning.on_ack(&AckObservation {
                    now: at,
                    smoothed_rtt: rtt,
                    min_rtt: MIN_RTT,
                    rtt_variation: Duration::from_millis(1),
                    rtt_sample: Some(rtt),
                    delivery_rate: Some((rate, false)),
                    lost: false,
                    eligible: true,
                });
            }
            *now += rtt;
        }
        thinning.level()
    }

    #[test]
    fn a_queue_of_acks_that_thinning_drains_keeps_the_acks_sparse() {
        // Through a narrow return path: acks half as often empty the queue, at the same rate.
        let mut sender = Sender::default();
        let level = run(&mut sender, 20, 16, |level| if level == 0 { (Duration::from_millis(90), 1e6) } else { (MIN_RTT, 1e6) });
        assert_eq!(level, 1, "drained by one step, and nothing invites another");
    }

    #[test]
    fn a_rate_that_rises_with_sparser_acks_climbs_to_the_top_level() {
        // Each step doubles the rate and the acks still queue: every trial pays.
        let mut sender = Sender::default();
        let level = run(&mut sender, 40, 16, |level| (Duration::from_millis(80), 1e6 * f64::from(1 << level)));
        assert_eq!(level, MAX_LEVEL);
    }

    #[test]
    fn a_queue_of_data_is_left_alone() {
        // A narrow forward path: sparser acks change neither the queue nor the rate. Trials
        // come and go, ever further apart, and the level ends where it began.
        let mut sender = Sender::default();
        let mut trials = 0;
        let mut now_level = 0;
        for _ in 0..400 {
            let level = run(&mut sender, 1, 16, |_| (Duration::from_millis(90), 1e6));
            trials += u32::from(level > now_level);
            now_level = level;
        }
        assert_eq!(now_level, 0);
        assert!((3..=8).contains(&trials), "{trials} trials in 400 rounds (backing off 8, 16, 32, ... rounds)");
    }

    #[test]
    fn a_trial_that_costs_rate_ends_after_its_first_round() {
        // Sparser acks halve the rate (a window that binds while acks are held): the trial,
        // begun after two queued rounds, is given its first round and then ended.
        let mut sender = Sender::default();
        let path = |level: u32| (Duration::from_millis(90), if level == 0 { 1e6 } else { 0.5e6 });
        assert_eq!(run(&mut sender, 3, 16, path), 1, "on trial");
        // The trial's first round is the one under way when it began (its acks left before
        // the change); the next, at half the rate, ends it.
        assert_eq!(run(&mut sender, 1, 16, path), 1, "the trial's first round is given");
        assert_eq!(run(&mut sender, 1, 16, path), 0, "ended after its second round, not its fourth");
        assert_eq!(sender.thinning.wait_rounds, FIRST_WAIT_ROUNDS);
    }

    #[test]
    fn nothing_happens_without_a_queue_or_while_the_controller_is_not_settled() {
        assert_eq!(run(&mut Sender::default(), 50, 16, |_| (MIN_RTT, 1e6)), 0);
        let mut thinning = AckThinning::default();
        let mut now = Instant::from_millis(0);
        for _ in 0..50 * 16 {
            now += Duration::from_millis(6);
            let observation = AckObservation {
                now,
                smoothed_rtt: Duration::from_millis(90),
                min_rtt: MIN_RTT,
                rtt_variation: Duration::from_millis(1),
                rtt_sample: Some(Duration::from_millis(90)),
                delivery_rate: Some((1e6, false)),
                lost: false,
                eligible: false,
            };
            thinning.on_ack(&observation);
        }
        assert_eq!(thinning.level(), 0);
    }

    #[test]
    fn a_level_no_longer_needed_is_given_up() {
        // Sparse acks once helped; then the return path widened (no queue at any level).
        let mut sender = Sender::default();
        assert_eq!(run(&mut sender, 20, 16, |level| if level == 0 { (Duration::from_millis(90), 1e6) } else { (MIN_RTT, 1e6) }), 1);
        assert_eq!(run(&mut sender, HOLD_ROUNDS + 2 * TRIAL_ROUNDS, 16, |_| (MIN_RTT, 1e6)), 0);
    }

    #[test]
    fn a_level_still_needed_survives_its_trial() {
        // Denser acks bring the queue of acks back: the level returns, and is held again.
        let mut sender = Sender::default();
        let path = |level: u32| if level == 0 { (Duration::from_millis(90), 1e6) } else { (MIN_RTT, 1e6) };
        assert_eq!(run(&mut sender, 20, 16, path), 1);
        assert_eq!(run(&mut sender, HOLD_ROUNDS + 2 * TRIAL_ROUNDS, 16, path), 1);
    }
}
