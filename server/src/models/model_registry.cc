#include "models/model_registry.h"

#include <dirent.h>

#include <algorithm>

namespace attn::server {

StatusOr<ModelRegistry> ModelRegistry::FromDirectory(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Status::NotFound("--model-dir " + dir + ": cannot open directory");
  std::vector<std::string> files;
  const std::string ext = ".safetensors";
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) {
      files.push_back(n);
    }
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  ModelRegistry registry;
  for (const auto& f : files) {
    auto model = AttentionModel::LoadSafetensors(dir + "/" + f);
    if (!model.ok()) return model.status();
    std::string name = model->info().name;
    registry.models_.emplace(std::move(name), std::move(*model));
  }
  return registry;
}

ModelRegistry ModelRegistry::Demo() {
  ModelRegistry registry;
  for (auto& m : BuiltinDemoModels()) {
    std::string name = m.info().name;
    registry.models_.emplace(std::move(name), std::move(m));
  }
  return registry;
}

const AttentionModel* ModelRegistry::Find(const std::string& name) const {
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : &it->second;
}

std::vector<const AttentionModel*> ModelRegistry::All() const {
  std::vector<const AttentionModel*> all;
  for (const auto& [name, model] : models_) all.push_back(&model);
  return all;
}

std::string ModelRegistry::Names() const {
  std::string s;
  for (const auto& [name, model] : models_) s += (s.empty() ? "" : ", ") + name;
  return s.empty() ? "none" : s;
}

}  // namespace attn::server
