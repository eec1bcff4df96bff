// The models a server serves, by name. Immutable after construction, so
// lookups need no lock.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "attn/model.h"
#include "attn/status.h"

namespace attn::server {

class ModelRegistry {
 public:
  // Loads every *.safetensors file in `dir` (the model is named after the
  // file stem). Any file that fails to load fails the whole call, naming it.
  static StatusOr<ModelRegistry> FromDirectory(const std::string& dir);
  // The built-in demo models (BuiltinDemoModels()).
  static ModelRegistry Demo();

  ModelRegistry(ModelRegistry&&) = default;
  ModelRegistry& operator=(ModelRegistry&&) = default;

  // The model named `name`, or null.
  const AttentionModel* Find(const std::string& name) const;
  // All models, ordered by name.
  std::vector<const AttentionModel*> All() const;
  // "a, b, c", for error messages.
  std::string Names() const;

 private:
  ModelRegistry() = default;
  std::map<std::string, AttentionModel> models_;
};

}  // namespace attn::server
