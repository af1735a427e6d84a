//! Serde for the name-like enums: they travel as their canonical strings and
//! are parsed with the same rules (and messages) as in rule documents.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{ComponentType, OperationCode, OperationType, PowerOperation};

macro_rules! as_string {
    ($ty:ty) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(D::Error::custom)
            }
        }
    };
}

as_string!(ComponentType);
as_string!(OperationType);
as_string!(OperationCode);
as_string!(PowerOperation);
