//! keel-controller
