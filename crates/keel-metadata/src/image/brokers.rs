//! The brokers' slice of the image: registrations, what they allow, and
//! the replay of the records that register, fence, unfence, shut down,
//! unregister a broker or take its log dirs offline.

use serde::{Deserialize, Serialize};

use crate::error::{ReplayError, ReplayErrorKind};
use crate::ids::{BrokerEpoch, BrokerId, IncarnationId, TopicPartition};
use crate::records::RegisterBrokerRecord;

use super::{err, MetadataImage};

/// A registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: BrokerId,
    /// Log index of the registration record.
    pub epoch: BrokerEpoch,
    pub incarnation: IncarnationId,
    pub address: String,
    pub rack: Option<String>,
    pub log_dirs: Vec<String>,
    /// Failed log dirs; replicas placed in them are offline.
    pub offline_log_dirs: Vec<String>,
    /// A fenced broker may not lead or join an ISR.
    pub fenced: bool,
    /// In controlled shutdown: may not become leader or join an ISR.
    pub shutting_down: bool,
    /// `host:port` of its Kafka listener; `None` when it registered none.
    pub kafka_address: Option<String>,
}

impl BrokerRegistration {
    /// Unfenced and not shutting down: may become a leader.
    pub fn can_lead(&self) -> bool {
        !self.fenced && !self.shutting_down
    }

    /// The log dir that holds `tp` on this broker: a deterministic spread of
    /// partitions over dirs, computed the same way by brokers and controllers.
    pub fn dir_of(&self, tp: &TopicPartition) -> Option<&str> {
        if self.log_dirs.is_empty() {
            return None;
        }
        let h = (tp.topic_id.0 as u64) ^ ((tp.topic_id.0 >> 64) as u64) ^ u64::from(tp.partition.0);
        let i = (h % self.log_dirs.len() as u64) as usize;
        Some(self.log_dirs[i].as_str())
    }

    /// The replica of `tp` here is usable: broker unfenced, its dir online.
    pub fn replica_online(&self, tp: &TopicPartition) -> bool {
        if self.fenced {
            return false;
        }
        match self.dir_of(tp) {
            Some(dir) => !self.offline_log_dirs.iter().any(|d| d == dir),
            None => true,
        }
    }

    /// Fenced: a fenced broker is gone, its shutdown (if any) is over.
    pub(super) fn fence(&mut self) {
        self.fenced = true;
        self.shutting_down = false;
    }

    /// Unfenced: it may lead and join ISRs again.
    pub(super) fn unfence(&mut self) {
        self.fenced = false;
    }

    /// In controlled shutdown: it may no longer become leader or join an ISR.
    pub(super) fn begin_shutdown(&mut self) {
        self.shutting_down = true;
    }

    /// `dirs` added to the failed log dirs (kept sorted, each once).
    pub(super) fn take_dirs_offline(&mut self, dirs: &[String]) {
        for d in dirs {
            if !self.offline_log_dirs.contains(d) {
                self.offline_log_dirs.push(d.clone());
            }
        }
        self.offline_log_dirs.sort();
    }
}

impl MetadataImage {
    pub fn broker(&self, id: BrokerId) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    /// Registered, unfenced and not shutting down.
    pub fn can_lead(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| b.can_lead())
    }

    /// Registered and unfenced (a shutting-down broker is still live).
    pub fn is_unfenced(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// The replica of `tp` on `id` can serve: broker unfenced, dir online.
    pub fn replica_online(&self, tp: &TopicPartition, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| b.replica_online(tp))
    }

    /// A new registration: fenced until it is unfenced, its epoch the
    /// index of this entry.
    pub(super) fn replay_register(
        &mut self,
        r: &RegisterBrokerRecord,
        offset: u64,
    ) -> Result<(), ReplayError> {
        self.brokers.insert(
            r.broker,
            BrokerRegistration {
                id: r.broker,
                epoch: BrokerEpoch(offset),
                incarnation: r.incarnation,
                address: r.address.clone(),
                rack: r.rack.clone(),
                log_dirs: r.log_dirs.clone(),
                offline_log_dirs: Vec::new(),
                fenced: true,
                shutting_down: false,
                // Set by the `BrokerKafkaListener` record that follows, if any.
                kafka_address: None,
            },
        );
        Ok(())
    }

    /// Applies `change` to the registration of `broker`, which must be of
    /// `epoch`.
    pub(super) fn replay_broker_change(
        &mut self,
        broker: BrokerId,
        epoch: BrokerEpoch,
        offset: u64,
        change: impl FnOnce(&mut BrokerRegistration),
    ) -> Result<(), ReplayError> {
        change(self.broker_mut(broker, epoch, offset)?);
        Ok(())
    }

    /// Removes broker `broker` of `epoch`, which must be fenced.
    pub(super) fn replay_unregister_broker(
        &mut self,
        broker: BrokerId,
        epoch: BrokerEpoch,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let b = self.broker_mut(broker, epoch, offset)?;
        if !b.fenced {
            return Err(err(offset, ReplayErrorKind::BrokerNotFenced(broker)));
        }
        self.brokers.remove(&broker);
        Ok(())
    }

    /// The Kafka listener of the broker registered by this very entry.
    pub(super) fn replay_kafka_listener(
        &mut self,
        broker: BrokerId,
        address: &str,
        offset: u64,
    ) -> Result<(), ReplayError> {
        // Only the registration of this very entry: its epoch is this
        // entry's index.
        let b = self.broker_mut(broker, BrokerEpoch(offset), offset)?;
        b.kafka_address = Some(address.to_string());
        Ok(())
    }

    /// The registration of `id`, which must be of `epoch`, to change.
    fn broker_mut(
        &mut self,
        id: BrokerId,
        epoch: BrokerEpoch,
        offset: u64,
    ) -> Result<&mut BrokerRegistration, ReplayError> {
        let b = self
            .brokers
            .get_mut(&id)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownBroker(id)))?;
        if b.epoch != epoch {
            return Err(err(
                offset,
                ReplayErrorKind::BrokerEpochMismatch {
                    broker: id,
                    expected: b.epoch.0,
                    got: epoch.0,
                },
            ));
        }
        Ok(b)
    }
}
