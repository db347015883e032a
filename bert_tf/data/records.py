"""The pretraining TFRecord: Google's schema, a fast encoder of it, and the check of a file.

The one contract between the data writer (pretraining_data.py) and every reader
(input_pipeline.py, training): feature names, dtypes and lengths live here and nowhere else.
"""

import struct

import numpy as np

from bert_tf.data.files import InputDataError

# Google's create_pretraining_data.py schema: feature -> (dtype name, length). A length is the
# name of the argument that sets it, or a fixed number. Written here, read by input_pipeline.
FEATURES = {
    "input_ids": ("int64", "max_seq_length"),
    "input_mask": ("int64", "max_seq_length"),
    "segment_ids": ("int64", "max_seq_length"),
    "masked_lm_positions": ("int64", "max_predictions_per_seq"),
    "masked_lm_ids": ("int64", "max_predictions_per_seq"),
    "masked_lm_weights": ("float32", "max_predictions_per_seq"),
    "next_sentence_labels": ("int64", 1),
}


def feature_lengths(max_seq_length, max_predictions_per_seq):
    sizes = {"max_seq_length": max_seq_length, "max_predictions_per_seq": max_predictions_per_seq}
    return {name: sizes.get(length, length) for name, (_, length) in FEATURES.items()}


def _varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_bytes(values):
    """Packed protobuf varints of a non-negative integer matrix [n, L] -> (bytes of all rows
    concatenated, per-row byte offsets [n+1] as a list)."""
    values = values.astype(np.uint64)
    width = max(1, (int(values.max(initial=0)).bit_length() + 6) // 7)  # bytes of the largest
    if width == 1:
        step = values.shape[1]
        return values.astype(np.uint8).tobytes(), list(range(0, step * (len(values) + 1), step))
    num_bytes = np.ones(values.shape, np.int64)
    for k in range(1, width):
        num_bytes += values >= np.uint64(1 << (7 * k))
    groups = np.stack([((values >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
                       | np.where(num_bytes - 1 > k, 0x80, 0).astype(np.uint8)
                       for k in range(width)], axis=-1)
    data = groups[np.arange(width) < num_bytes[..., None]].tobytes()
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(num_bytes.sum(1), out=offsets[1:])
    return data, offsets.tolist()


class _FeatureFraming:
    """The bytes around one feature's packed values inside a tf.train.Example; they depend only
    on the payload length, so they are built once per length."""

    def __init__(self, name, is_float):
        key = name.encode()
        self.key_part = b"\x0a" + _varint(len(key)) + key + b"\x12"
        self.list_tag = b"\x12" if is_float else b"\x1a"  # Feature.float_list / int64_list
        self.prefixes = {}

    def prefix(self, payload_length):
        prefix = self.prefixes.get(payload_length)
        if prefix is None:
            value_list_length = 1 + len(_varint(payload_length)) + payload_length
            feature = (self.list_tag + _varint(value_list_length) + b"\x0a"
                       + _varint(payload_length))
            feature_length = len(feature) + payload_length
            entry = self.key_part + _varint(feature_length) + feature
            prefix = b"\x0a" + _varint(len(entry) + payload_length) + entry
            self.prefixes[payload_length] = prefix
        return prefix


_FRAMINGS = {name: _FeatureFraming(name, dtype == "float32")
             for name, (dtype, _) in FEATURES.items()}


def serialize_examples(features):
    """Serialized tf.train.Example protos for a batch: features maps each FEATURES name to an
    array [n, length] (int64, or float32 for masked_lm_weights). Packed encoding, features in
    FEATURES order; TF parses it exactly as protobuf's own serialization."""
    columns = []
    for name in FEATURES:
        values = features[name]
        if values.dtype == np.float32:
            data = np.ascontiguousarray(values, "<f4").tobytes()
            step = values.shape[1] * 4
            offsets = list(range(0, step * (len(values) + 1), step))
        else:
            data, offsets = _varint_bytes(values)
        columns.append((_FRAMINGS[name].prefix, data, offsets))
    records = []
    for row in range(len(features["input_ids"])):
        parts = []
        for prefix, data, offsets in columns:
            start, end = offsets[row], offsets[row + 1]
            parts.append(prefix(end - start))
            parts.append(data[start:end])
        body = b"".join(parts)
        records.append(b"\x0a" + _varint(len(body)) + body)
    return records


def num_to_predict(num_tokens, masked_lm_prob, max_predictions_per_seq, ops=np):
    """Google's number of positions to mask in a sequence of `num_tokens` tokens:
    min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob))), as floats.
    `ops` provides round, maximum and minimum: numpy, or TensorFlow's (input_pipeline.TF_OPS)."""
    wanted = ops.round(num_tokens * masked_lm_prob)
    return ops.minimum(float(max_predictions_per_seq), ops.maximum(1.0, wanted))


def feature_spec(max_seq_length, max_predictions_per_seq):
    """tf.io.parse_example's spec for the schema."""
    import tensorflow as tf

    lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
    return {name: tf.io.FixedLenFeature([lengths[name]], tf.as_dtype(dtype))
            for name, (dtype, _) in FEATURES.items()}


RECORDS_CHECKED_PER_FILE = 16


def validate_records(files, max_seq_length, max_predictions_per_seq, vocab_size=None,
                     masked=None, flag="input_files"):
    """Checks the first records of every file against what the reader expects.

    Args:
      files: TFRecord paths.
      max_seq_length, max_predictions_per_seq: the lengths the reader will parse.
      vocab_size: if given, every token id must be below it (else NaN losses on GPUs).
      masked: True/False to require masked (static) or unmasked (dynamic masking) records.
      flag: the flag the files came from, named in errors.

    Returns:
      The files that hold at least one record.

    Raises:
      InputDataError naming the flag, the file and what to do.
    """
    nonempty = check_records(files, max_seq_length, max_predictions_per_seq, vocab_size, masked,
                             flag)
    if not nonempty:
        raise InputDataError(all_empty_message(files, flag))
    return nonempty


def all_empty_message(files, flag) -> str:
    return f"--{flag}: all {len(files)} file(s) are empty, e.g. {files[0]}"


def check_records(files, max_seq_length, max_predictions_per_seq, vocab_size=None, masked=None,
                  flag="input_files") -> list:
    """validate_records without the requirement that some file holds records (a part of the
    files, e.g. one rank's share, may all be empty): returns the non-empty ones."""
    import tensorflow as tf

    expected = feature_lengths(max_seq_length, max_predictions_per_seq)
    nonempty = []
    for path in files:
        offset = truncated_at(path)
        if offset is not None:
            raise InputDataError(truncation_message(path, offset, flag))
        try:
            records = list(tf.data.TFRecordDataset(path).take(RECORDS_CHECKED_PER_FILE)
                           .as_numpy_iterator())
        except tf.errors.DataLossError as e:
            raise InputDataError(damage_message([path], flag, e)) from None
        examples = [tf.train.Example.FromString(record).features.feature for record in records]
        masked_records = sum(_check_example(feature, path, flag, expected, vocab_size, masked)
                             for feature in examples)
        if masked is True and records and not masked_records:
            raise InputDataError(
                f"--{flag}: {path} holds unmasked records (none of its first {len(records)} has "
                "a masked position: create_pretraining_data.py --dynamic_masking): train on them "
                "with --dynamic_masking --vocab_file=VOCAB")
        if records:
            nonempty.append(path)
    return nonempty


# The start-up check reads this much of a file's end, not every record header: a file cut by
# an interrupted copy or a full disk ends inside its last record, which the headers of the
# records before it in this window lead to. Records of BERT's schema are a few KiB.
TAIL_BYTES = 1 << 20
_HEADER, _FOOTER = 12, 4  # length (u64) and its masked CRC32C; the data's masked CRC32C


def truncated_at(path):
    """Byte offset of a record cut short at the end of a TFRecord file, else None.

    Reads the last TAIL_BYTES: when the checksummed headers from the first record found there
    lead exactly to the end of the file, it is whole. Otherwise (a cut record, a small file,
    records longer than the window) every header is followed from the start, which names the
    offset of the record cut short."""
    import tensorflow as tf

    size = tf.io.gfile.stat(path).length
    opener = open if "://" not in path else tf.io.gfile.GFile  # local files: plain, faster
    with opener(path, "rb") as f:
        if size > TAIL_BYTES and _tail_is_whole(f, size):
            return None
        return _walk_headers(f, size)[1]


COUNT_BUFFER_BYTES = 1 << 16


def count_records(path) -> int:
    """The records in a TFRecord file, from their headers (12 bytes read per record, none
    parsed): what a resumed run needs to skip whole files without reading them."""
    import tensorflow as tf

    size = tf.io.gfile.stat(path).length
    # Local files through a 64 KiB buffer: a seek to a header inside it costs no system call,
    # so records smaller than the buffer are read in 64 KiB steps rather than one 12-byte read
    # (and the kernel's readahead behind it) per record; a seek past it reads 64 KiB there.
    with (open(path, "rb", buffering=COUNT_BUFFER_BYTES) if "://" not in path
          else tf.io.gfile.GFile(path, "rb")) as f:
        return _walk_headers(f, size)[0]


def _walk_headers(f, size):
    """Follows every 12-byte record header (length, length CRC) with seeks: about 12 bytes
    read per record. Returns (the number of whole records, the offset of the record that runs
    past `size` or None)."""
    offset, count = 0, 0
    while offset < size:
        f.seek(offset)
        header = f.read(_HEADER)
        if len(header) < _HEADER:
            return count, offset
        (length,) = struct.unpack("<Q", header[:8])
        if header[8:] != _masked_crc32c(header[:8]) or offset + _HEADER + length + _FOOTER > size:
            return count, offset
        offset += _HEADER + length + _FOOTER
        count += 1
    return count, None


def _tail_is_whole(f, size) -> bool:
    """Whether the records of the file's last TAIL_BYTES end exactly at its end. The first
    record there is found by its header and data checksums (a false match of both: about one
    in 2**64), the rest by their header checksums."""
    f.seek(size - TAIL_BYTES)
    tail = f.read(TAIL_BYTES)
    offset = _first_record(tail)
    while offset is not None and offset + _HEADER <= len(tail):
        length = _record_length(tail, offset)
        if length is None:
            return False
        offset += _HEADER + length + _FOOTER
    return offset == len(tail)


def _first_record(tail):
    """Offset of the first whole record in `tail` whose header and data checksums hold."""
    for offset in range(len(tail) - _HEADER - _FOOTER + 1):
        length = _record_length(tail, offset)
        end = offset + _HEADER + (length or 0)
        if length is not None and end + _FOOTER <= len(tail) and \
                tail[end:end + _FOOTER] == _masked_crc32c(tail[offset + _HEADER:end]):
            return offset
    return None


def _record_length(data, offset):
    """The record length in the header at `offset` if its checksum holds, else None."""
    length_bytes = data[offset:offset + 8]
    if len(length_bytes) < 8 or struct.unpack("<Q", length_bytes)[0] > TAIL_BYTES:
        return None  # not a header here, or a record the window cannot hold
    if data[offset + 8:offset + _HEADER] != _masked_crc32c(length_bytes):
        return None
    return struct.unpack("<Q", length_bytes)[0]


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def _masked_crc32c(data) -> bytes:
    """TFRecord's checksum: CRC32C, rotated and offset ("masked"), little-endian."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def truncation_message(path, offset, flag):
    """What a user reads about a TFRecord file damaged at `offset` (see truncated_at): cut
    short (a whole header whose record runs past the end), or not TFRecord data there."""
    import tensorflow as tf

    size = tf.io.gfile.stat(path).length
    with tf.io.gfile.GFile(path, "rb") as f:
        f.seek(offset)
        header = f.read(_HEADER)
    if len(header) == _HEADER and header[8:] == _masked_crc32c(header[:8]):
        return (f"--{flag}: {path} is truncated: its record at byte {offset} runs past the end "
                f"of the file ({size} bytes), as an interrupted copy or a full disk leaves it; "
                f"copy or create that file again, or leave it out of --{flag}")
    return (f"--{flag}: {path} is not a whole TFRecord file: at byte {offset} of its {size} "
            "there is no record header (other data, or a damaged file); create it again with "
            f"create_pretraining_data.py, or leave it out of --{flag}")


def damage_message(files, flag, error):
    """What a user reads when TensorFlow's reader failed with DataLossError `error` on one of
    `files` (it does not say which): the file cut short or not TFRecord data, or else the
    file whose record fails its checksum."""
    import tensorflow as tf

    for path in files:
        offset = truncated_at(path)
        if offset is not None:
            return truncation_message(path, offset, flag)
    for path in files:
        try:
            for _ in tf.data.TFRecordDataset(path):
                pass
        except tf.errors.DataLossError:
            return (f"--{flag}: {path} holds a damaged record (its checksum fails); create "
                    f"the file again, or leave it out of --{flag}")
    return f"--{flag}: a record is unreadable ({error.message.strip()})"


def _check_example(feature, path, flag, expected, vocab_size, masked) -> bool:
    """Raises InputDataError for a record the reader cannot use; returns whether it has a
    masked position. A file of masked records is judged by all its checked records (check_records):
    a record of static masking may hold no masked position."""
    for name, (dtype, _) in FEATURES.items():
        if name not in feature:
            raise InputDataError(f"--{flag}: {path}: records lack feature {name!r}; expected "
                                 "Google's pretraining schema (make it with "
                                 "create_pretraining_data.py)")
        values = feature[name].float_list.value if dtype == "float32" else \
            feature[name].int64_list.value
        if len(values) != expected[name]:
            raise InputDataError(
                f"--{flag}: {path}: feature {name!r} has length {len(values)}, expected "
                f"{expected[name]} (max_seq_length={expected['input_ids']}, "
                f"max_predictions_per_seq={expected['masked_lm_ids']}); pass the lengths the "
                "data was created with")
    largest = max(max(feature[name].int64_list.value, default=0)
                  for name in ("input_ids", "masked_lm_ids"))
    if vocab_size is not None and largest >= vocab_size:
        raise InputDataError(
            f"--{flag}: {path} holds token id {largest} but vocab_size is {vocab_size} in "
            "the bert_config.json (this gives NaN losses on GPUs); use the bert_config.json "
            "whose vocab_size matches the vocab file the data was made with")
    is_masked = any(weight != 0 for weight in feature["masked_lm_weights"].float_list.value)
    if masked is False and is_masked:
        raise InputDataError(
            f"--{flag}: {path} holds masked records, but --dynamic_masking masks during "
            "training and needs unmasked ones: make the data with create_pretraining_data.py "
            "--dynamic_masking, or drop --dynamic_masking")
    return is_masked
