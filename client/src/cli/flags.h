// The one command-line parser of attention-client: a table of every flag,
// the commands it applies to and its help line. Flags may come before or
// after the command ("attention-client --target h:p health" and
// "attention-client health --target h:p" are the same), as "--flag value" or
// "--flag=value". Every error is INVALID_ARGUMENT and names the flag.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "attn/status.h"

namespace attn::client {

struct FlagSpec {
  const char* name;      // "--target"
  const char* value;     // "HOST:PORT"; nullptr for a switch
  const char* commands;  // "*" (every command) or a list, e.g. "attention mha bench"
  const char* help;
};

// Every flag of every command, in the order --help lists them.
const std::vector<FlagSpec>& FlagTable();
// "health models attention cross mha bench"
const std::vector<std::string>& Commands();

struct CommandLine {
  std::string command;     // "" when none was given
  std::string subcommand;  // session's: create, extend, info, fork, truncate, delete, list
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  bool help = false;  // --help or -h

  bool has(const std::string& flag) const;
  std::string get(const std::string& flag, const std::string& fallback = "") const;
  // Typed readers; `fallback` when the flag is absent. Errors name the flag.
  StatusOr<int64_t> Int(const std::string& flag, int64_t lo, int64_t hi, int64_t fallback) const;
  // A duration: "500ms", "30s", "2m" or plain seconds ("1.5").
  StatusOr<double> Seconds(const std::string& flag, double fallback) const;
  // One of `choices`.
  StatusOr<std::string> Choice(const std::string& flag, const std::vector<std::string>& choices,
                               const std::string& fallback) const;
};

// Parses argv after the program name. The first word that is not a flag or
// a flag's value is the command. Refuses unknown commands, unknown flags and
// flags that do not apply to the command, naming them.
StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

// The usage text: the commands and common flags (command ""), or one
// command's flags.
std::string Usage(const std::string& command);

// Parsers the typed readers share, exposed for lists (--concurrency 1,2,4).
StatusOr<int64_t> ParseIntValue(const std::string& flag, const std::string& value, int64_t lo,
                                int64_t hi);
StatusOr<double> ParseSecondsValue(const std::string& flag, const std::string& value);

}  // namespace attn::client
