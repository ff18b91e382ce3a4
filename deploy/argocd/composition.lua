-- Argo CD health of an enoki Composition (also used for Symphony: the same conditions).
-- Healthy: the newest spec is synthesized, applied and every resource is Ready.
-- Degraded: its synthesis failed (Stalled=True) for the newest spec.
-- Progressing: anything else (not reconciled yet, a change held back, resources not ready).
-- Suspended: spec.suspend is true (`enoki suspend`).
local hs = {}
local function condition(t)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end
if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
  hs.message = "spec.suspend is true: neither synthesized nor reconciled"
  return hs
end
if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "waiting for enoki to reconcile it"
  return hs
end
local stalled = condition("Stalled")
local current = obj.status.observedGeneration ~= nil
  and obj.status.observedGeneration == obj.metadata.generation
if current and stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = (stalled.reason or "") .. ": " .. (stalled.message or "")
  return hs
end
if not current then
  local why = condition("Reconciling")
  hs.status = "Progressing"
  hs.message = "the newest spec is not synthesized and applied yet"
  if why ~= nil and why.message ~= nil and why.message ~= "" then
    hs.message = hs.message .. " (" .. why.message .. ")"
  end
  return hs
end
local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end
hs.status = "Progressing"
if ready ~= nil then
  hs.message = ready.message or ""
else
  hs.message = "waiting for its resources"
end
return hs
