//! serde structs mirroring the TOML files one to one (filled in by the config work).
