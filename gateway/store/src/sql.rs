//! One way for the store's queries to reach either database: a connection of the SQLite
//! backend or a pooled client of the PostgreSQL one ([`Db`]), parameters as [`Value`]s and rows
//! read by column name ([`Row`]). Each query is written once, in the common subset of the two
//! dialects, with SQLite's numbered placeholders (`?1`), which become PostgreSQL's (`$1`).

use crate::error::StoreError;
use crate::pg_io;
use std::sync::Arc;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// A parameter or a column's value, in the types both databases share.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    Bool(bool),
}

macro_rules! value_from {
    ($($t:ty => $variant:ident($conv:expr)),* $(,)?) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$variant($conv(v))
            }
        })*
    };
}

value_from! {
    i64 => Int(|v| v),
    u32 => Int(i64::from),
    f64 => Real(|v| v),
    bool => Bool(|v| v),
    String => Text(|v| v),
    &str => Text(str::to_owned),
    &String => Text(String::clone),
    &[u8] => Blob(<[u8]>::to_vec),
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// `vals![a, b]`: the parameters of a query.
macro_rules! vals {
    ($($v:expr),* $(,)?) => {
        &[$($crate::sql::Value::from($v)),*][..]
    };
}
pub(crate) use vals;

/// A row: column names shared by every row of one result, and the values.
pub struct Row {
    columns: Arc<[String]>,
    values: Vec<Value>,
}

/// A Rust type a column can be read as.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }
}

impl FromValue for u32 {
    fn from_value(v: &Value) -> Option<u32> {
        i64::from_value(v).and_then(|i| u32::try_from(i).ok())
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> Option<f64> {
        match v {
            Value::Real(r) => Some(*r),
            // SQLite stores a REAL that is a whole number as an integer.
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
}

impl FromValue for bool {
    fn from_value(v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            Value::Int(i) => Some(*i != 0),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Option<String> {
        match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Option<Vec<u8>> {
        match v {
            Value::Blob(b) => Some(b.clone()),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Option<Option<T>> {
        match v {
            Value::Null => Some(None),
            v => T::from_value(v).map(Some),
        }
    }
}

impl Row {
    pub fn from_postgres(row: &tokio_postgres::Row) -> Result<Row, StoreError> {
        let columns: Arc<[String]> = row.columns().iter().map(|c| c.name().to_owned()).collect();
        let values = (0..columns.len())
            .map(|i| Value::from_postgres(row, i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Row { columns, values })
    }

    /// The column `name`, as `T`; a missing column or another type is a corrupt database.
    pub fn get<T: FromValue>(&self, name: &str) -> Result<T, StoreError> {
        let at = self
            .columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| StoreError::Corrupt(format!("no column {name} in the result")))?;
        self.at(at)
    }

    /// The `i`th column, as `T`.
    pub fn at<T: FromValue>(&self, i: usize) -> Result<T, StoreError> {
        let value = self
            .values
            .get(i)
            .ok_or_else(|| StoreError::Corrupt(format!("no column {i} in the result")))?;
        T::from_value(value).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "column {} holds {value:?}, not a {}",
                self.columns.get(i).map_or("?", String::as_str),
                std::any::type_name::<T>()
            ))
        })
    }

    /// A JSON column (stored as text).
    pub fn json<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<T, StoreError> {
        let text: String = self.get(name)?;
        serde_json::from_str(&text).map_err(|e| {
            StoreError::Corrupt(format!("column {name} is not the JSON expected: {e}"))
        })
    }
}

/// A connection to run the store's queries on, inside or outside a transaction.
pub enum Db<'a> {
    Sqlite(&'a rusqlite::Connection),
    Postgres(&'a deadpool_postgres::ClientWrapper),
}

impl Db<'_> {
    /// Runs a statement; returns the number of rows it changed.
    pub fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        match self {
            Db::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql)?;
                Ok(stmt.execute(rusqlite::params_from_iter(params))? as u64)
            }
            Db::Postgres(client) => pg_io::execute(client, &placeholders(sql), &pg_params(params)),
        }
    }

    /// Every row of a query.
    pub fn query(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, StoreError> {
        match self {
            Db::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql)?;
                let columns: Arc<[String]> =
                    stmt.column_names().into_iter().map(str::to_owned).collect();
                let width = columns.len();
                let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    let values = (0..width)
                        .map(|i| row.get_ref(i).map(Value::from_sqlite))
                        .collect::<Result<Vec<_>, _>>()?;
                    out.push(Row {
                        columns: columns.clone(),
                        values,
                    });
                }
                Ok(out)
            }
            Db::Postgres(client) => pg_io::query(client, &placeholders(sql), &pg_params(params))?
                .iter()
                .map(Row::from_postgres)
                .collect(),
        }
    }

    /// The first row of a query, if any.
    pub fn query_opt(&self, sql: &str, params: &[Value]) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The first row of a query that always returns one (an aggregate, a row just written).
    pub fn query_one(&self, sql: &str, params: &[Value]) -> Result<Row, StoreError> {
        self.query_opt(sql, params)?
            .ok_or_else(|| StoreError::Corrupt(format!("no row returned by: {sql}")))
    }
}

/// The parameters as PostgreSQL's client takes them.
fn pg_params(params: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as _).collect()
}

/// `?N` → `$N` outside string literals: the queries are written for SQLite first.
fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    for c in sql.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => out.push('$'),
            c => out.push(c),
        }
    }
    out
}

impl Value {
    fn from_sqlite(v: rusqlite::types::ValueRef<'_>) -> Value {
        use rusqlite::types::ValueRef;
        match v {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Int(i),
            ValueRef::Real(r) => Value::Real(r),
            ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }

    fn from_postgres(row: &tokio_postgres::Row, i: usize) -> Result<Value, StoreError> {
        fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
            row: &'a tokio_postgres::Row,
            i: usize,
            wrap: impl FnOnce(T) -> Value,
        ) -> Result<Value, StoreError> {
            Ok(row
                .try_get::<_, Option<T>>(i)
                .map_err(StoreError::from)?
                .map_or(Value::Null, wrap))
        }
        let ty = row.columns()[i].type_();
        match *ty {
            Type::INT8 => get(row, i, Value::Int),
            Type::INT4 => get(row, i, |v: i32| Value::Int(v.into())),
            Type::INT2 => get(row, i, |v: i16| Value::Int(v.into())),
            Type::FLOAT8 => get(row, i, Value::Real),
            Type::FLOAT4 => get(row, i, |v: f32| Value::Real(v.into())),
            Type::BOOL => get(row, i, Value::Bool),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => get(row, i, Value::Text),
            Type::BYTEA => get(row, i, Value::Blob),
            _ => Err(StoreError::Corrupt(format!(
                "column {} has type {ty}, which the store does not read",
                row.columns()[i].name()
            ))),
        }
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(*i),
            Value::Real(r) => ValueRef::Real(*r),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
            Value::Bool(b) => ValueRef::Integer(i64::from(*b)),
        }))
    }
}

/// PostgreSQL types the parameter's column: an integer goes to whichever integer width the
/// column has (checked), so the queries need no casts.
impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (self, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Int(i), &Type::INT8) => i.to_sql(ty, out),
            (Value::Int(i), &Type::INT4) => i32::try_from(*i)?.to_sql(ty, out),
            (Value::Int(i), &Type::INT2) => i16::try_from(*i)?.to_sql(ty, out),
            (Value::Int(i), &Type::FLOAT8) => (*i as f64).to_sql(ty, out),
            (Value::Real(r), &Type::FLOAT8) => r.to_sql(ty, out),
            (Value::Bool(b), &Type::BOOL) => b.to_sql(ty, out),
            (Value::Text(s), _) => s.as_str().to_sql(ty, out),
            (Value::Blob(b), _) => b.as_slice().to_sql(ty, out),
            (v, ty) => Err(format!("{v:?} cannot be sent as a {ty}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        // Checked per value in `to_sql`.
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_literals() {
        assert_eq!(
            placeholders("SELECT '?1', x FROM t WHERE a = ?1 AND b = ?12"),
            "SELECT '?1', x FROM t WHERE a = $1 AND b = $12"
        );
    }
}
