"""Messages and stubs generated from proto/snowflake/v1/snowflake.proto by `regen-proto`
(never edited by hand)."""
