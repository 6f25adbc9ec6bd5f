//! The broker's session with the active controller: its registration
//! (broker epoch), what the last heartbeat answer said, when the controller
//! was last heard from, and the highest controller epoch seen. Every
//! controller request is fenced here, by its stamp, before anything else
//! looks at it.

use keel_metadata::decide::HeartbeatReply;
use keel_metadata::{ApiError, BrokerEpoch, BrokerId, ControllerEpoch, ControllerStamp, ErrorCode};
use tracing::{info, warn};

use crate::metrics;

/// Registration, fencing and controller-epoch fencing of one broker.
#[derive(Debug)]
pub(crate) struct Session {
    /// This broker's configured id.
    id: BrokerId,
    /// Current registration; `None` before registering and after the
    /// session is assumed lost, so every stamped request is refused then.
    broker_epoch: Option<BrokerEpoch>,
    /// As the last heartbeat answer said; true from every (re)registration
    /// until an answer says otherwise.
    fenced: bool,
    /// As the last heartbeat answer said.
    caught_up: bool,
    /// The controller allowed the controlled shutdown to finish.
    should_shut_down: bool,
    /// Last successful registration or heartbeat answer (monotonic ms).
    last_contact_ms: u64,
    /// Highest controller epoch seen; lower ones are refused.
    controller_epoch_seen: ControllerEpoch,
}

impl Session {
    pub(crate) fn new(id: BrokerId) -> Self {
        Self {
            id,
            broker_epoch: None,
            fenced: true,
            caught_up: false,
            should_shut_down: false,
            last_contact_ms: 0,
            controller_epoch_seen: ControllerEpoch(0),
        }
    }

    pub(crate) fn id(&self) -> BrokerId {
        self.id
    }

    /// The current registration, if any.
    pub(crate) fn broker_epoch(&self) -> Option<BrokerEpoch> {
        self.broker_epoch
    }

    pub(crate) fn fenced(&self) -> bool {
        self.fenced
    }

    pub(crate) fn caught_up(&self) -> bool {
        self.caught_up
    }

    pub(crate) fn should_shut_down(&self) -> bool {
        self.should_shut_down
    }

    pub(crate) fn controller_epoch_seen(&self) -> ControllerEpoch {
        self.controller_epoch_seen
    }

    /// How long the controller has been silent (ms).
    pub(crate) fn silent_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.last_contact_ms)
    }

    pub(crate) fn on_registered(&mut self, epoch: BrokerEpoch, now_ms: u64) {
        self.broker_epoch = Some(epoch);
        self.fenced = true;
        self.caught_up = false;
        self.should_shut_down = false;
        self.last_contact_ms = now_ms;
        info!(
            broker = self.id.0,
            broker_epoch = epoch.0,
            "registered with the controller"
        );
    }

    /// A heartbeat answer with no error, from controller `controller_id`
    /// at `controller_epoch`. Returns false if it answers an older
    /// registration (the session was given up meanwhile).
    pub(crate) fn on_heartbeat(
        &mut self,
        sent_epoch: BrokerEpoch,
        reply: &HeartbeatReply,
        controller_id: u32,
        controller_epoch: ControllerEpoch,
        now_ms: u64,
    ) -> bool {
        if self.broker_epoch != Some(sent_epoch) {
            return false;
        }
        self.last_contact_ms = now_ms;
        if reply.is_fenced != self.fenced {
            if reply.is_fenced {
                warn!(
                    broker = self.id.0,
                    broker_epoch = sent_epoch.0,
                    "fenced by the controller"
                );
            } else {
                info!(
                    broker = self.id.0,
                    broker_epoch = sent_epoch.0,
                    "unfenced by the controller"
                );
            }
            self.fenced = reply.is_fenced;
        }
        self.caught_up = reply.is_caught_up;
        if reply.should_shut_down && !self.should_shut_down {
            info!(broker = self.id.0, "controller allows shutdown");
        }
        self.should_shut_down = reply.should_shut_down;
        if controller_epoch > self.controller_epoch_seen {
            self.raise_controller_epoch(controller_epoch, controller_id);
        }
        true
    }

    /// The controller no longer knows this registration (or the session
    /// timed out): refuse requests until re-registered. The caller stops
    /// leading first, while the lines it writes still name the epoch.
    pub(crate) fn lose(&mut self, why: &str) {
        if let Some(epoch) = self.broker_epoch {
            warn!(
                broker = self.id.0,
                broker_epoch = epoch.0,
                reason = why,
                "registration lost; assuming fenced"
            );
        }
        self.broker_epoch = None;
        self.fenced = true;
        self.caught_up = false;
    }

    /// True when registered and no heartbeat answer arrived for a whole
    /// session timeout.
    pub(crate) fn expired(&self, now_ms: u64, session_timeout_ms: u64) -> bool {
        self.broker_epoch.is_some() && self.silent_ms(now_ms) > session_timeout_ms
    }

    /// Epoch fencing common to every controller request: a stamp from a
    /// lower controller epoch than seen, or naming another registration,
    /// is refused. A higher controller epoch is learned even when the
    /// broker epoch is refused.
    pub(crate) fn check_stamp(&mut self, stamp: Option<ControllerStamp>) -> Result<(), ApiError> {
        let Some(s) = stamp else {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "missing controller stamp",
            ));
        };
        let ce = s.controller_epoch;
        // The feature exists only to show that the Jepsen checkers catch a
        // broker that accepts a deposed controller; never build it otherwise.
        if ce < self.controller_epoch_seen && !cfg!(feature = "unsafe-skip-controller-epoch-check")
        {
            return Err(ApiError::new(
                ErrorCode::StaleControllerEpoch,
                format!(
                    "controller {} epoch {} is older than epoch {} already seen",
                    s.controller_id, ce.0, self.controller_epoch_seen.0
                ),
            ));
        }
        if ce > self.controller_epoch_seen {
            // A higher term is a real newer controller even if it has not
            // learned our registration yet: fence the old one from now on.
            self.raise_controller_epoch(ce, s.controller_id);
        }
        match self.broker_epoch {
            Some(e) if e == s.broker_epoch => Ok(()),
            Some(e) => Err(ApiError::new(
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "request names broker epoch {}, current is {}",
                    s.broker_epoch.0, e.0
                ),
            )),
            None => Err(ApiError::new(
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "request names broker epoch {}, broker is not registered",
                    s.broker_epoch.0
                ),
            )),
        }
    }

    fn raise_controller_epoch(&mut self, ce: ControllerEpoch, controller_id: u32) {
        info!(
            controller = controller_id,
            controller_epoch = ce.0,
            previous = self.controller_epoch_seen.0,
            "new controller epoch seen"
        );
        self.controller_epoch_seen = ce;
        ::metrics::gauge!(metrics::CONTROLLER_EPOCH_SEEN).set(ce.0 as f64);
    }

    /// The O(1) gauges, after every change of registration or fencing.
    pub(crate) fn publish_gauges(&self) {
        ::metrics::gauge!(metrics::FENCED).set(if self.fenced { 1.0 } else { 0.0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(controller_epoch: u64, broker_epoch: u64) -> ControllerStamp {
        ControllerStamp {
            controller_id: 1,
            controller_epoch: ControllerEpoch(controller_epoch),
            broker_epoch: BrokerEpoch(broker_epoch),
        }
    }

    fn code(r: Result<(), ApiError>) -> ErrorCode {
        r.err().map_or(ErrorCode::None, |e| e.code)
    }

    #[test]
    fn stamps_are_fenced_by_controller_epoch_then_broker_epoch() {
        let mut s = Session::new(BrokerId(1));
        assert_eq!(
            code(s.check_stamp(Some(stamp(3, 7)))),
            ErrorCode::StaleBrokerEpoch
        );
        s.on_registered(BrokerEpoch(7), 0);
        assert_eq!(code(s.check_stamp(None)), ErrorCode::InvalidRequest);
        assert_eq!(code(s.check_stamp(Some(stamp(3, 7)))), ErrorCode::None);
        assert_eq!(
            code(s.check_stamp(Some(stamp(2, 7)))),
            ErrorCode::StaleControllerEpoch
        );
        assert_eq!(
            code(s.check_stamp(Some(stamp(4, 8)))),
            ErrorCode::StaleBrokerEpoch
        );
        // The higher epoch was still learned: epoch 3 is now stale.
        assert_eq!(s.controller_epoch_seen(), ControllerEpoch(4));
        assert_eq!(
            code(s.check_stamp(Some(stamp(3, 7)))),
            ErrorCode::StaleControllerEpoch
        );
    }

    #[test]
    fn a_heartbeat_answer_for_an_older_registration_changes_nothing() {
        let mut s = Session::new(BrokerId(1));
        s.on_registered(BrokerEpoch(7), 0);
        let unfenced = HeartbeatReply {
            is_caught_up: true,
            is_fenced: false,
            ..HeartbeatReply::default()
        };
        assert!(s.on_heartbeat(BrokerEpoch(7), &unfenced, 1, ControllerEpoch(3), 10));
        assert!(!s.fenced() && s.caught_up());
        assert_eq!(s.controller_epoch_seen(), ControllerEpoch(3));
        s.lose("test");
        s.on_registered(BrokerEpoch(9), 20);
        assert!(!s.on_heartbeat(BrokerEpoch(7), &unfenced, 1, ControllerEpoch(4), 30));
        assert!(s.fenced());
        assert_eq!(s.controller_epoch_seen(), ControllerEpoch(3));
        assert_eq!(s.silent_ms(30), 10);
    }
}
