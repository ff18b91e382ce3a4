-- Argo CD health of an enoki Synthesizer.
-- Healthy: the module of the newest spec is fetched and compiled (Ready=True).
-- Degraded: it cannot be (Ready=False, e.g. ModuleUnavailable).
-- Progressing: enoki has not loaded the newest spec yet.
local hs = {}
if obj.status == nil or obj.status.observedGeneration == nil
  or obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "waiting for enoki to load the module"
  return hs
end
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Ready" and c.status == "True" then
      hs.status = "Healthy"
      hs.message = c.message or ""
      return hs
    end
    if c.type == "Ready" and c.status == "False" then
      hs.status = "Degraded"
      hs.message = (c.reason or "") .. ": " .. (c.message or "")
      return hs
    end
  end
end
hs.status = "Progressing"
hs.message = "waiting for enoki to load the module"
return hs
