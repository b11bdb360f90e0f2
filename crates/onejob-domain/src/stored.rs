//! The states, roles, origins and event kinds as a database stores them:
//! their names, in a text column, read back by parsing. Built only with the
//! `sqlx` feature, which the service turns on and the rules' own tests do
//! not need.

use sqlx::error::BoxDynError;
use sqlx::{Database, Decode, Encode, Type};

use crate::{AttemptOrigin, AttemptState, EventKind, JobState, KeyRole};

macro_rules! stored_as_name {
    ($($name:ty),+) => {$(
        impl<DB: Database> Type<DB> for $name
        where
            str: Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as Type<DB>>::type_info()
            }
            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: Database> Encode<'q, DB> for $name
        where
            &'q str: Encode<'q, DB>,
        {
            fn encode_by_ref(&self, buf: &mut <DB as Database>::ArgumentBuffer<'q>) -> Result<sqlx::encode::IsNull, BoxDynError> {
                let name: &'q str = self.as_str();
                <&'q str as Encode<'q, DB>>::encode(name, buf)
            }
        }

        impl<'r, DB: Database> Decode<'r, DB> for $name
        where
            &'r str: Decode<'r, DB>,
        {
            fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
                Ok(<&'r str as Decode<'r, DB>>::decode(value)?.parse()?)
            }
        }
    )+};
}

stored_as_name!(AttemptState, JobState, KeyRole, AttemptOrigin, EventKind);
