//! What the tests of the controller's requests share: a scripted API server and the
//! objects they start from.

pub(super) mod api_mock;
pub(super) mod fixtures;
