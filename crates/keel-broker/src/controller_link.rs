//! Which controller the broker talks to: the hinted active controller if a
//! NOT_CONTROLLER answer named one, else the next configured address.

use keel_proto::pb;

/// Current target plus the rotation through the configured addresses.
#[derive(Debug)]
pub(crate) struct ControllerLink {
    addresses: Vec<String>,
    /// Index of the next configured address to try when rotating.
    next: usize,
    current: String,
}

impl ControllerLink {
    /// `addresses` must not be empty (checked by the config).
    pub(crate) fn new(addresses: Vec<String>) -> Self {
        let current = addresses.first().cloned().unwrap_or_default();
        Self {
            addresses,
            next: 1,
            current,
        }
    }

    pub(crate) fn current(&self) -> String {
        self.current.clone()
    }

    /// After NOT_CONTROLLER: go where the hint says, or rotate if it says
    /// nothing new.
    pub(crate) fn follow(&mut self, hint: Option<&pb::LeaderHint>) {
        match hint {
            Some(h) if !h.address.is_empty() && h.address != self.current => {
                tracing::info!(from = %self.current, to = %h.address, node = h.node_id, "following active controller hint");
                self.current = h.address.clone();
            }
            _ => self.rotate(),
        }
    }

    /// After a transport failure or a useless answer: next configured address.
    pub(crate) fn rotate(&mut self) {
        if self.addresses.is_empty() {
            return;
        }
        let i = self.next % self.addresses.len();
        self.next = self.next.wrapping_add(1);
        self.current = self.addresses[i].clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hint_is_followed_and_rotation_covers_every_address() {
        let mut l = ControllerLink::new(vec!["a:1".into(), "b:1".into(), "c:1".into()]);
        assert_eq!(l.current(), "a:1");
        l.follow(Some(&pb::LeaderHint {
            node_id: 3,
            address: "c:1".into(),
        }));
        assert_eq!(l.current(), "c:1");
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3 {
            l.follow(None);
            seen.insert(l.current());
        }
        assert_eq!(seen.len(), 3);
    }
}
