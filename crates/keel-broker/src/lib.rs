//! keel-broker
