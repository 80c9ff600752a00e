//! A decoupled pipeline's answer as the several results it stands for (Triton's decoupled
//! transaction policy: zero or more responses per request): a JSON array the last post-plugin
//! returned gives one result per element (a `json` BYTES tensor each), tensors give one result
//! per row of their first dimension (every output must have the same number of rows).

use crate::error::{ApiError, ApiResult};
use infergate_engine::{DataType, Tensor, TensorData};

/// The results in `outputs`, in order.
pub fn split(pipeline: &str, outputs: Vec<Tensor>) -> ApiResult<Vec<Vec<Tensor>>> {
    if let [only] = &outputs[..] {
        if only.name == "json" && only.datatype == DataType::Bytes {
            return json_elements(pipeline, only);
        }
    }
    let Some(rows) = outputs
        .first()
        .map(|t| t.shape.first().copied().unwrap_or(1))
    else {
        return Ok(Vec::new());
    };
    let rows = usize::try_from(rows)
        .map_err(|_| ApiError::internal(format!("pipeline '{pipeline}': a negative dimension")))?;
    let mut results: Vec<Vec<Tensor>> = (0..rows).map(|_| Vec::new()).collect();
    for tensor in outputs {
        if tensor.shape.first().copied().unwrap_or(1) as usize != rows {
            return Err(ApiError::internal(format!(
                "pipeline '{pipeline}' is decoupled, but its outputs have different numbers of rows ('{}' has shape {:?}, {rows} rows expected)",
                tensor.name, tensor.shape
            )));
        }
        for (result, row) in results.iter_mut().zip(rows_of(&tensor, rows)) {
            result.push(row);
        }
    }
    Ok(results)
}

/// A tensor cut into `rows` tensors of one row each (`[1, ...]`).
fn rows_of(tensor: &Tensor, rows: usize) -> Vec<Tensor> {
    let mut shape = tensor.shape.clone();
    match shape.first_mut() {
        Some(first) => *first = 1,
        None => shape.push(1),
    }
    let per = |len: usize| len.checked_div(rows).unwrap_or(0);
    (0..rows)
        .map(|r| {
            let data = match &tensor.data {
                TensorData::Raw(raw) => {
                    let n = per(raw.len());
                    TensorData::Raw(raw[r * n..(r + 1) * n].to_vec())
                }
                TensorData::Bytes(items) => {
                    let n = per(items.len());
                    TensorData::Bytes(items[r * n..(r + 1) * n].to_vec())
                }
            };
            Tensor {
                name: tensor.name.clone(),
                datatype: tensor.datatype,
                shape: shape.clone(),
                data,
            }
        })
        .collect()
}

/// A JSON answer: its elements when it is an array, else the document as one result.
fn json_elements(pipeline: &str, tensor: &Tensor) -> ApiResult<Vec<Vec<Tensor>>> {
    let TensorData::Bytes(items) = &tensor.data else {
        return Ok(vec![vec![tensor.clone()]]);
    };
    let text = items.first().map(Vec::as_slice).unwrap_or_default();
    let value: serde_json::Value = serde_json::from_slice(text).map_err(|e| {
        ApiError::internal(format!(
            "pipeline '{pipeline}': the last post-plugin returned invalid JSON: {e}"
        ))
    })?;
    let one = |v: &serde_json::Value| Tensor {
        name: "json".into(),
        datatype: DataType::Bytes,
        shape: vec![1],
        data: TensorData::Bytes(vec![v.to_string().into_bytes()]),
    };
    Ok(match &value {
        serde_json::Value::Array(elements) => elements.iter().map(|e| vec![one(e)]).collect(),
        other => vec![vec![one(other)]],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_split_by_rows_and_json_arrays_by_element() {
        let scores = Tensor::from_f32("s", vec![3, 2], &[1., 2., 3., 4., 5., 6.]).unwrap();
        let labels = Tensor {
            name: "l".into(),
            datatype: DataType::Bytes,
            shape: vec![3],
            data: TensorData::Bytes(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]),
        };
        let results = split("p", vec![scores, labels]).unwrap();
        assert_eq!(results.len(), 3);
        assert_eq!(results[1][0].to_f32().unwrap(), vec![3.0, 4.0]);
        assert_eq!(results[1][0].shape, vec![1, 2]);
        assert_eq!(results[2][1].data, TensorData::Bytes(vec![b"c".to_vec()]));

        let json = Tensor {
            name: "json".into(),
            datatype: DataType::Bytes,
            shape: vec![1],
            data: TensorData::Bytes(vec![br#"[{"k": 1}, "two"]"#.to_vec()]),
        };
        let results = split("p", vec![json]).unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(
            results[1][0].data,
            TensorData::Bytes(vec![b"\"two\"".to_vec()])
        );
        assert!(split("p", Vec::new()).unwrap().is_empty());
        let ragged = vec![
            Tensor::from_f32("a", vec![2], &[1., 2.]).unwrap(),
            Tensor::from_f32("b", vec![3], &[1., 2., 3.]).unwrap(),
        ];
        assert!(split("p", ragged).is_err());
    }
}
