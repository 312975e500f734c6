"""Alert conditions over an integration's runs, as pure functions (no I/O, no clock)."""
