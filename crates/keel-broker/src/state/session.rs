//! The broker's session with the active controller: its registration
//! (broker epoch), what the last heartbeat answer said, when the controller
//! was last heard from, and the controller epoch the quorum confirmed.
//! Every controller request is fenced here, by its stamp and the
//! certificate that sent it, before anything else looks at it; the check
//! changes nothing, so a refused request leaves the broker as it was.
//!
//! The controller epoch is learned only from the quorum's own answers
//! (registration and heartbeat answers of the active controller, which name
//! its id and term), never from a request: a request stamped with a higher
//! epoch is refused as unconfirmed until a heartbeat answer confirms it.
//! Any allowance above the confirmed term would let whoever holds a
//! controller key raise the fence that far and lock the real controller
//! out until the quorum's term caught up.

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
    /// The highest controller epoch the quorum confirmed (a registration
    /// or heartbeat answer of the active controller); lower ones are
    /// refused, and so are higher ones until confirmed.
    controller_epoch_seen: ControllerEpoch,
    /// The controller that confirmed `controller_epoch_seen`: the one
    /// controller that may act in that epoch (Raft elects at most one
    /// leader per term). `None` until an answer names it.
    controller_seen: Option<u32>,
}

/// Who sent a controller request, as its transport tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sender {
    /// Over TLS: the controller id its certificate names.
    Controller(u64),
    /// Over plaintext: no identity to check.
    Unauthenticated,
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
            controller_seen: None,
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

    /// A registration answer: the new broker epoch and, from controllers
    /// that send them, the active controller's id and epoch.
    pub(crate) fn on_registered(
        &mut self,
        epoch: BrokerEpoch,
        controller: Option<(u32, ControllerEpoch)>,
        now_ms: u64,
    ) {
        if let Some((id, ce)) = controller {
            self.confirm_controller(ce, id);
        }
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
        self.confirm_controller(controller_epoch, controller_id);
        true
    }

    /// The quorum's active controller answered as `controller_id` in
    /// `controller_epoch`: the fence moves up to it (never down).
    fn confirm_controller(&mut self, controller_epoch: ControllerEpoch, controller_id: u32) {
        if controller_epoch > self.controller_epoch_seen {
            self.raise_controller_epoch(controller_epoch, controller_id);
        } else if controller_epoch == self.controller_epoch_seen && self.controller_seen.is_none() {
            self.controller_seen = Some(controller_id);
        }
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

    /// Fencing common to every controller request, in order: the stamp
    /// must be there; over TLS it must name the controller whose
    /// certificate sent it; its controller epoch must be the one the
    /// quorum confirmed (lower is stale; higher is not confirmed yet), and
    /// its controller the one the quorum named for that epoch; its broker
    /// epoch must be this broker's registration. Nothing changes here,
    /// accepted or not.
    pub(crate) fn check_stamp(
        &self,
        stamp: Option<ControllerStamp>,
        sender: Sender,
    ) -> Result<(), ApiError> {
        let Some(s) = stamp else {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "missing controller stamp",
            ));
        };
        if let Sender::Controller(id) = sender {
            if id != u64::from(s.controller_id) {
                return Err(ApiError::new(
                    ErrorCode::ClusterAuthorizationFailed,
                    format!(
                        "the stamp names controller {} but the certificate is controller {id}'s",
                        s.controller_id
                    ),
                ));
            }
        }
        let (ce, seen) = (s.controller_epoch, self.controller_epoch_seen);
        // The feature exists only to show that the Jepsen checkers catch a
        // broker that accepts a deposed controller; never build it otherwise.
        if ce < seen && !cfg!(feature = "unsafe-skip-controller-epoch-check") {
            return Err(ApiError::new(
                ErrorCode::StaleControllerEpoch,
                format!(
                    "controller {} epoch {} is older than epoch {} already seen",
                    s.controller_id, ce.0, seen.0
                ),
            ));
        }
        if ce > seen {
            return Err(ApiError::new(
                ErrorCode::UnconfirmedControllerEpoch,
                format!(
                    "controller {} epoch {} is above epoch {}, the highest the quorum has confirmed to this broker",
                    s.controller_id, ce.0, seen.0
                ),
            ));
        }
        if ce == seen && self.controller_seen != Some(s.controller_id) {
            return Err(match self.controller_seen {
                Some(active) => ApiError::new(
                    ErrorCode::StaleControllerEpoch,
                    format!(
                        "controller {} is not the controller of epoch {} (controller {active} is)",
                        s.controller_id, ce.0
                    ),
                ),
                None => ApiError::new(
                    ErrorCode::UnconfirmedControllerEpoch,
                    format!(
                        "no answer of the quorum has named the controller of epoch {} yet",
                        ce.0
                    ),
                ),
            });
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
        self.controller_seen = Some(controller_id);
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
    fn stamps_are_fenced_by_certificate_confirmed_epoch_and_controller_then_broker_epoch() {
        let c1 = Sender::Controller(1);
        let mut s = Session::new(BrokerId(1));
        // Nothing confirmed yet: even the right broker epoch waits.
        assert_eq!(
            code(s.check_stamp(Some(stamp(3, 7)), c1)),
            ErrorCode::UnconfirmedControllerEpoch
        );
        s.on_registered(BrokerEpoch(7), Some((1, ControllerEpoch(3))), 0);
        assert_eq!(code(s.check_stamp(None, c1)), ErrorCode::InvalidRequest);
        assert_eq!(code(s.check_stamp(Some(stamp(3, 7)), c1)), ErrorCode::None);
        assert_eq!(
            code(s.check_stamp(Some(stamp(3, 7)), Sender::Unauthenticated)),
            ErrorCode::None
        );
        // Another controller's certificate cannot stamp as controller 1.
        assert_eq!(
            code(s.check_stamp(Some(stamp(3, 7)), Sender::Controller(2))),
            ErrorCode::ClusterAuthorizationFailed
        );
        assert_eq!(
            code(s.check_stamp(Some(stamp(2, 7)), c1)),
            ErrorCode::StaleControllerEpoch
        );
        // Above the confirmed epoch, by one or by anything: refused, and
        // nothing learned from it.
        for ce in [4, 1_000_000, u64::MAX] {
            assert_eq!(
                code(s.check_stamp(Some(stamp(ce, 7)), c1)),
                ErrorCode::UnconfirmedControllerEpoch
            );
        }
        assert_eq!(s.controller_epoch_seen(), ControllerEpoch(3));
        assert_eq!(code(s.check_stamp(Some(stamp(3, 7)), c1)), ErrorCode::None);
        assert_eq!(
            code(s.check_stamp(Some(stamp(3, 8)), c1)),
            ErrorCode::StaleBrokerEpoch
        );
        // Controller 2 in epoch 3, which controller 1 holds: refused.
        let two = ControllerStamp {
            controller_id: 2,
            ..stamp(3, 7)
        };
        assert_eq!(
            code(s.check_stamp(Some(two), Sender::Controller(2))),
            ErrorCode::StaleControllerEpoch
        );
        // A heartbeat answer confirms epoch 4 under controller 2: epoch 3
        // is stale from then on, and only controller 2 acts in 4.
        let reply = HeartbeatReply::default();
        assert!(s.on_heartbeat(BrokerEpoch(7), &reply, 2, ControllerEpoch(4), 1));
        let four = ControllerStamp {
            controller_id: 2,
            ..stamp(4, 7)
        };
        assert_eq!(
            code(s.check_stamp(Some(four), Sender::Controller(2))),
            ErrorCode::None
        );
        assert_eq!(
            code(s.check_stamp(Some(stamp(4, 7)), c1)),
            ErrorCode::StaleControllerEpoch
        );
        assert_eq!(
            code(s.check_stamp(Some(stamp(3, 7)), c1)),
            ErrorCode::StaleControllerEpoch
        );
        // A lower epoch in a later answer never lowers the fence.
        assert!(s.on_heartbeat(BrokerEpoch(7), &reply, 1, ControllerEpoch(3), 2));
        assert_eq!(s.controller_epoch_seen(), ControllerEpoch(4));
    }

    #[test]
    fn a_heartbeat_answer_for_an_older_registration_changes_nothing() {
        let mut s = Session::new(BrokerId(1));
        s.on_registered(BrokerEpoch(7), None, 0);
        let unfenced = HeartbeatReply {
            is_caught_up: true,
            is_fenced: false,
            ..HeartbeatReply::default()
        };
        assert!(s.on_heartbeat(BrokerEpoch(7), &unfenced, 1, ControllerEpoch(3), 10));
        assert!(!s.fenced() && s.caught_up());
        assert_eq!(s.controller_epoch_seen(), ControllerEpoch(3));
        s.lose("test");
        s.on_registered(BrokerEpoch(9), None, 20);
        assert!(!s.on_heartbeat(BrokerEpoch(7), &unfenced, 1, ControllerEpoch(4), 30));
        assert!(s.fenced());
        assert_eq!(s.controller_epoch_seen(), ControllerEpoch(3));
        assert_eq!(s.silent_ms(30), 10);
    }
}
