//! Images made by replay only.
//!
//! The active controller decides many commands against one working image,
//! each seeing the records of those before it. That image must be exactly
//! what replaying those records gives, as on every other node: a
//! [`Replayed`] is the proof. Only this crate's replaying code can make one
//! (its fields are private), so a decision can hand its scratch image over
//! instead of having its records replayed a second time, and nothing else
//! can pass an image off as replayed. [`Chain`] strings decisions together
//! on such an image (housekeeping, deletion steps).

use crate::error::ReplayError;
use crate::image::MetadataImage;
use crate::records::MetadataRecord;

use super::Decision;

/// An image proven to be a base image with a list of records replayed onto
/// it, each at the base's offset + 1 (what the active controller does with
/// a batch's records).
#[derive(Clone, PartialEq, Eq)]
pub struct Replayed {
    /// The base with the records replayed.
    image: MetadataImage,
    /// Offset of the base the records were replayed onto.
    base_offset: u64,
    /// How many records were replayed.
    records: usize,
}

/// A proof that does not match a fresh replay (a bug in whoever made it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayMismatch {
    #[error("the proof is for {proof_records} records on offset {proof_offset}, not {records} on {offset}")]
    Shape {
        proof_records: usize,
        proof_offset: u64,
        records: usize,
        offset: u64,
    },
    #[error("the records do not replay on the base: {0}")]
    Replay(ReplayError),
    #[error("the image differs from the records replayed afresh on the base")]
    Image,
}

impl Replayed {
    /// Replays `records` on (an O(1) copy of) `base`.
    pub fn replay(base: &MetadataImage, records: &[MetadataRecord]) -> Result<Self, ReplayError> {
        let mut image = base.clone();
        let offset = base.offset() + 1;
        for r in records {
            image.replay(r, offset)?;
        }
        Ok(Self {
            image,
            base_offset: base.offset(),
            records: records.len(),
        })
    }

    /// Made by this crate's own step-by-step replay ([`super::Working`]).
    pub(crate) fn from_steps(image: MetadataImage, base_offset: u64, records: usize) -> Self {
        Self {
            image,
            base_offset,
            records,
        }
    }

    /// A proof with a different image, for tests of the checks.
    #[doc(hidden)]
    pub fn forged_for_tests(&self, image: MetadataImage) -> Self {
        Self {
            image,
            base_offset: self.base_offset,
            records: self.records,
        }
    }

    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    pub fn into_image(self) -> MetadataImage {
        self.image
    }

    /// The cheap check, always made: the proof is about as many records as
    /// `records` on an image at `base`'s offset.
    pub fn fits(&self, base: &MetadataImage, records: &[MetadataRecord]) -> bool {
        self.base_offset == base.offset() && self.records == records.len()
    }

    /// The full check (debug builds and tests): `records` replayed afresh
    /// on `base` give exactly this image.
    pub fn verify(
        &self,
        base: &MetadataImage,
        records: &[MetadataRecord],
    ) -> Result<(), ReplayMismatch> {
        if !self.fits(base, records) {
            return Err(ReplayMismatch::Shape {
                proof_records: self.records,
                proof_offset: self.base_offset,
                records: records.len(),
                offset: base.offset(),
            });
        }
        let fresh = Self::replay(base, records).map_err(ReplayMismatch::Replay)?;
        if fresh.image != self.image {
            return Err(ReplayMismatch::Image);
        }
        Ok(())
    }
}

/// Decisions chained on one working image, each made on the image with
/// every earlier one's records replayed. A decision whose records do not
/// replay (a bug in its decide function) is dropped whole: the working
/// image goes back to what it was before it, so later decisions never see
/// half of one.
pub struct Chain {
    /// The base with every kept decision's records replayed.
    work: Replayed,
    /// The kept decisions' records, in order.
    records: Vec<MetadataRecord>,
    /// Why dropped decisions were dropped, for the caller to report.
    dropped: Vec<ReplayError>,
}

impl Chain {
    /// A chain on (an O(1) copy of) `base`.
    pub fn new(base: &MetadataImage) -> Self {
        Self {
            work: Replayed {
                image: base.clone(),
                base_offset: base.offset(),
                records: 0,
            },
            records: Vec::new(),
            dropped: Vec::new(),
        }
    }

    /// The image with every kept decision so far.
    pub fn image(&self) -> &MetadataImage {
        &self.work.image
    }

    /// Makes a decision on the working image and keeps it (taking its own
    /// proof when it kept one, else replaying its records), or drops it
    /// whole when its records do not replay. Returns the decision's reply
    /// either way.
    pub fn decide<R>(&mut self, f: impl FnOnce(&MetadataImage) -> Decision<R>) -> R {
        let Decision {
            records,
            reply,
            replayed,
        } = f(&self.work.image);
        if records.is_empty() {
            return reply;
        }
        let next = match replayed {
            Some(p) if p.fits(&self.work.image, &records) => Ok(p.image),
            _ => Replayed::replay(&self.work.image, &records).map(Replayed::into_image),
        };
        match next {
            Ok(image) => {
                self.work.image = image;
                self.work.records += records.len();
                self.records.extend(records);
            }
            Err(e) => self.dropped.push(e),
        }
        reply
    }

    /// The kept records, the proof of the image they make, and the errors
    /// of the dropped decisions.
    pub fn finish(self) -> (Vec<MetadataRecord>, Option<Replayed>, Vec<ReplayError>) {
        let proof = (!self.records.is_empty()).then_some(self.work);
        (self.records, proof, self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BrokerId;
    use crate::synthetic::SyntheticCluster;

    fn image() -> MetadataImage {
        SyntheticCluster {
            brokers: 3,
            topics: 2,
            partitions_per_topic: 3,
        }
        .image()
        .expect("synthetic cluster replays")
        .0
    }

    #[test]
    fn a_chain_proves_the_image_of_all_its_records() {
        let base = image();
        let mut chain = Chain::new(&base);
        // Fencing keeps no image of its own (the chain replays it); the
        // next decision sees it and keeps one (the chain adopts it).
        chain.decide(|image| image.decide_fence_broker(BrokerId(0)));
        assert!(chain.image().broker(BrokerId(0)).unwrap().fenced);
        let epoch = chain.image().broker(BrokerId(1)).unwrap().epoch;
        let reply = chain.decide(|image| image.decide_controlled_shutdown(BrokerId(1), epoch));
        assert!(reply.is_ok());
        assert!(chain.image().broker(BrokerId(1)).unwrap().shutting_down);
        let (records, proof, dropped) = chain.finish();
        assert!(!records.is_empty() && dropped.is_empty());
        let proof = proof.expect("a chain with records proves its image");
        proof.verify(&base, &records).expect("the proof holds");
    }

    #[test]
    fn a_decision_that_does_not_replay_is_dropped_whole() {
        let base = image();
        let mut chain = Chain::new(&base);
        chain.decide(|image| image.decide_fence_broker(BrokerId(0)));
        let epoch = base.broker(BrokerId(2)).unwrap().epoch;
        // Its first record would replay, its second does not (a bug in a
        // decide step): the chain goes on from the image before it.
        let bad = Decision {
            records: vec![
                MetadataRecord::BrokerShuttingDown {
                    broker: BrokerId(2),
                    epoch,
                },
                MetadataRecord::FenceBroker {
                    broker: BrokerId(42),
                    epoch,
                },
            ],
            reply: (),
            replayed: None,
        };
        chain.decide(|_| bad);
        assert!(
            !chain.image().broker(BrokerId(2)).unwrap().shutting_down,
            "nothing of the bad decision is in the image"
        );
        chain.decide(|image| image.decide_fence_broker(BrokerId(1)));
        let (records, proof, dropped) = chain.finish();
        assert_eq!(dropped.len(), 1);
        assert!(records
            .iter()
            .all(|r| !matches!(r, MetadataRecord::BrokerShuttingDown { .. })));
        proof
            .expect("the kept decisions are proven")
            .verify(&base, &records)
            .expect("the proof holds for the kept records");
    }

    #[test]
    fn a_proof_that_differs_from_a_fresh_replay_is_caught() {
        let base = image();
        let d =
            base.decide_controlled_shutdown(BrokerId(1), base.broker(BrokerId(1)).unwrap().epoch);
        let proof = d.replayed.clone().expect("shutdown keeps its image");
        proof.verify(&base, &d.records).expect("honest proof");
        // The image with one more change than its records.
        let mut tampered = proof.image().clone();
        let epoch = base.broker(BrokerId(2)).unwrap().epoch;
        tampered
            .replay(
                &MetadataRecord::FenceBroker {
                    broker: BrokerId(2),
                    epoch,
                },
                base.offset() + 1,
            )
            .unwrap();
        let forged = proof.forged_for_tests(tampered);
        assert!(
            forged.fits(&base, &d.records),
            "the cheap check cannot see it"
        );
        assert_eq!(forged.verify(&base, &d.records), Err(ReplayMismatch::Image));
        // A proof for other records or another base does not fit.
        assert!(!proof.fits(&base, &d.records[1..]));
        let mut later = base.clone();
        later.advance_offset(base.offset() + 5);
        assert!(matches!(
            proof.verify(&later, &d.records),
            Err(ReplayMismatch::Shape { .. })
        ));
    }
}
