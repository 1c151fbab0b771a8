//! Validating newtypes used by `raw` (filled in by the config work).
