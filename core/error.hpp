// traintwin error types. Libraries never print or exit: they throw one of these with context
// (file, key, rule, allowed values) and the CLI prints `what()`.
#pragma once

#include <stdexcept>
#include <string>

namespace traintwin {

/// Base of every error traintwin throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A scenario/topology file or command-line override is malformed or breaks a rule.
/// The message names the file (and line where known), the key, and the rule or allowed values.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A requested feature exists in the vocabulary but is not implemented yet (never silently
/// ignored or downgraded).
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

/// An argument passed to a library function is outside its documented domain.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A communication backend (MPI, NCCL) reported a failure; the message names the operation,
/// the group and the backend's own error text.
class CommError : public Error {
 public:
  using Error::Error;
};

/// A data file (tokenizer vocabulary, indexed dataset, checkpoint) is missing, truncated,
/// corrupt or does not belong to the run; the message names the file and what is wrong.
class DataError : public Error {
 public:
  using Error::Error;
};

}  // namespace traintwin
