//! Serde support (feature `serde`): a decimal string in human-readable formats such as JSON
//! (JavaScript loses precision above 2^53), the integer in binary formats; reading accepts both.

use crate::id::SnowflakeId;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

impl Serialize for SnowflakeId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            serializer.serialize_u64(self.as_u64())
        }
    }
}

struct IdVisitor;

impl Visitor<'_> for IdVisitor {
    type Value = SnowflakeId;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a snowflake id: an integer in 0..=9223372036854775807, or one as a decimal string",
        )
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<SnowflakeId, E> {
        SnowflakeId::try_from(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<SnowflakeId, E> {
        SnowflakeId::try_from(v).map_err(E::custom)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<SnowflakeId, E> {
        u64::try_from(v)
            .ok()
            .and_then(SnowflakeId::new)
            .ok_or_else(|| {
                E::custom(format_args!(
                    "invalid snowflake id: expected 0..={}, found {v}",
                    SnowflakeId::MAX
                ))
            })
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<SnowflakeId, E> {
        u64::try_from(v)
            .ok()
            .and_then(SnowflakeId::new)
            .ok_or_else(|| {
                E::custom(format_args!(
                    "invalid snowflake id: expected 0..={}, found {v}",
                    SnowflakeId::MAX
                ))
            })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<SnowflakeId, E> {
        v.parse().map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for SnowflakeId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(IdVisitor)
        } else {
            deserializer.deserialize_u64(IdVisitor)
        }
    }
}
