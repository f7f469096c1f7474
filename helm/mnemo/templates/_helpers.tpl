{{/*
Names, labels and the pieces every workload shares. The components are the keys of
.Values.components (the gateway, then one per consumer of the table of consumers,
mnemo.handlers.registry, which a unit test checks), rendered gateway first, then by name.
*/}}

{{- define "mnemo.componentNames" -}}
{{- prepend (omit .Values.components "gateway" | keys | sortAlpha) "gateway" | join " " -}}
{{- end -}}

{{- define "mnemo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mnemo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "mnemo.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels common to every object of the release. */}}
{{- define "mnemo.labels" -}}
helm.sh/chart: {{ include "mnemo.chart" . }}
app.kubernetes.io/name: {{ include "mnemo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mnemo
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "name" "gateway"). */}}
{{- define "mnemo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mnemo.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{- define "mnemo.componentFullname" -}}
{{- printf "%s-%s" (include "mnemo.fullname" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mnemo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "mnemo.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The hook Jobs run before the release's own ServiceAccount exists, so they get one of
their own, created as a hook too, unless an existing account is named. */}}
{{- define "mnemo.hooksServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- printf "%s-hooks" (include "mnemo.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- include "mnemo.serviceAccountName" . -}}
{{- end -}}
{{- end -}}

{{- define "mnemo.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Merges two maps as JSON: keys of "over" replace those of "base", maps are merged key by
key, lists are replaced whole, and false, 0 and "" override like any other value, whatever
the merge helpers of the helm release in use do with empty values.
*/}}
{{- define "mnemo.deepMerge" -}}
{{- $out := deepCopy .base -}}
{{- range $key, $value := .over -}}
{{- $current := get $out $key -}}
{{- if and (kindIs "map" $value) (kindIs "map" $current) -}}
{{- $_ := set $out $key (include "mnemo.deepMerge" (dict "base" $current "over" $value) | fromJson) -}}
{{- else -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* One component's settings: chart defaults overridden by components.<name>, as JSON. */}}
{{- define "mnemo.component" -}}
{{- $over := get .root.Values.components .name | default dict -}}
{{- include "mnemo.deepMerge" (dict "base" .root.Values.defaults "over" $over) -}}
{{- end -}}

{{- define "mnemo.isConsumer" -}}
{{- if ne .name "gateway" -}}true{{- end -}}
{{- end -}}

{{/* Settings shared by every component, as ConfigMap data (no secrets here). */}}
{{- define "mnemo.configData" -}}
{{- $v := .Values -}}
MNEMO_MODE: distributed
MNEMO_LOG_LEVEL: {{ $v.config.logLevel | quote }}
MNEMO_DATA_DIR: /var/lib/mnemo
MNEMO_HEALTH_PORT: "8081"
{{- /* the kubelet probes the pod's address: the consumers' health port listens on all */}}
MNEMO_HEALTH_HOST: "0.0.0.0"
MNEMO_KAFKA_BOOTSTRAP: {{ required "kafka.bootstrap must list at least one broker" (join "," $v.kafka.bootstrap) | quote }}
MNEMO_KAFKA_TOPIC: {{ $v.kafka.topic | quote }}
MNEMO_KAFKA_PARTITIONS: {{ $v.kafka.partitions | quote }}
MNEMO_KAFKA_REPLICATION: {{ $v.kafka.replication | quote }}
MNEMO_KAFKA_MIN_INSYNC: {{ $v.kafka.minInsync | quote }}
MNEMO_KAFKA_SECURITY_PROTOCOL: {{ $v.kafka.securityProtocol | quote }}
{{- if eq $v.kafka.securityProtocol "SASL_SSL" }}
MNEMO_KAFKA_SASL_MECHANISM: {{ $v.kafka.sasl.mechanism | quote }}
{{- end }}
{{- if $v.kafka.tls.caSecret }}
MNEMO_KAFKA_SSL_CAFILE: /etc/mnemo/tls/kafka/{{ $v.kafka.tls.caKey }}
{{- end }}
{{- if $v.kafka.tls.clientSecret }}
MNEMO_KAFKA_SSL_CERTFILE: /etc/mnemo/tls/kafka-client/tls.crt
MNEMO_KAFKA_SSL_KEYFILE: /etc/mnemo/tls/kafka-client/tls.key
{{- end }}
MNEMO_CASSANDRA_HOSTS: {{ required "cassandra.hosts must list at least one contact point" (join "," $v.cassandra.hosts) | quote }}
MNEMO_CASSANDRA_PORT: {{ $v.cassandra.port | quote }}
MNEMO_CASSANDRA_KEYSPACE: {{ $v.cassandra.keyspace | quote }}
MNEMO_CASSANDRA_REPLICATION: {{ $v.cassandra.replication | quote }}
{{- if $v.cassandra.tenantKeyspaces }}
MNEMO_CASSANDRA_TENANT_KEYSPACES: {{ join "," $v.cassandra.tenantKeyspaces | quote }}
{{- end }}
{{- if $v.cassandra.tls.caSecret }}
MNEMO_CASSANDRA_SSL_CAFILE: /etc/mnemo/tls/cassandra/{{ $v.cassandra.tls.caKey }}
MNEMO_CASSANDRA_SSL_CHECK_HOSTNAME: {{ $v.cassandra.tls.checkHostname | toString | quote }}
{{- end }}
{{- if $v.cassandra.tls.clientSecret }}
MNEMO_CASSANDRA_SSL_CERTFILE: /etc/mnemo/tls/cassandra-client/tls.crt
MNEMO_CASSANDRA_SSL_KEYFILE: /etc/mnemo/tls/cassandra-client/tls.key
{{- end }}
MNEMO_QDRANT_URL: {{ required "qdrant.url is required" $v.qdrant.url | quote }}
{{- if $v.qdrant.tls.caSecret }}
MNEMO_QDRANT_CA_FILE: /etc/mnemo/tls/qdrant/{{ $v.qdrant.tls.caKey }}
{{- end }}
MNEMO_VAULT_ADDR: {{ required "vault.addr is required" $v.vault.addr | quote }}
MNEMO_VAULT_TRANSIT_MOUNT: {{ $v.vault.transitMount | quote }}
MNEMO_AUDIT_SIGNING_KEY: {{ $v.vault.auditSigningKey | quote }}
MNEMO_AUDIT_SIGNING_KEY_TYPE: {{ $v.vault.auditSigningKeyType | quote }}
MNEMO_AUDIT_ANCHOR_MOUNT: {{ $v.vault.auditAnchorMount | quote }}
{{- if $v.vault.agent.enabled }}
MNEMO_VAULT_TOKEN_FILE: /vault/secrets/token
{{- end }}
{{- if $v.vault.tls.caSecret }}
VAULT_CACERT: /etc/mnemo/tls/vault/{{ $v.vault.tls.caKey }}
{{- end }}
{{- if $v.config.registrationRules }}
MNEMO_RULES_FILE: /etc/mnemo/config/registration-rules.yaml
{{- end }}
{{- if $v.config.decayPolicy }}
MNEMO_DECAY_POLICY_FILE: /etc/mnemo/config/decay-policy.yaml
{{- end }}
{{- if $v.config.triggers }}
MNEMO_TRIGGERS_FILE: /etc/mnemo/config/triggers.yaml
{{- end }}
{{- if $v.otel.endpoint }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ $v.otel.endpoint | quote }}
{{- end }}
{{- end -}}

{{/* Checksum of everything in the ConfigMap: a change rolls the pods. */}}
{{- define "mnemo.configChecksum" -}}
{{- $files := dict "rules" .Values.config.registrationRules "decay" .Values.config.decayPolicy "triggers" .Values.config.triggers -}}
{{- printf "%s\n%s" (include "mnemo.configData" .) (toJson $files) | sha256sum -}}
{{- end -}}

{{- define "mnemo.secretRef" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret | quote }}
      key: {{ .key | quote }}
{{- end -}}

{{/* Credentials, only ever by reference to Secrets that already exist. */}}
{{- define "mnemo.secretEnv" -}}
{{- $v := .Values -}}
{{- if $v.kafka.sasl.existingSecret }}
{{- if $v.kafka.sasl.username }}
- name: MNEMO_KAFKA_SASL_USERNAME
  value: {{ $v.kafka.sasl.username | quote }}
{{- else }}
{{ include "mnemo.secretRef" (dict "env" "MNEMO_KAFKA_SASL_USERNAME" "secret" $v.kafka.sasl.existingSecret "key" $v.kafka.sasl.usernameKey) }}
{{- end }}
{{ include "mnemo.secretRef" (dict "env" "MNEMO_KAFKA_SASL_PASSWORD" "secret" $v.kafka.sasl.existingSecret "key" $v.kafka.sasl.passwordKey) }}
{{- end }}
{{- if $v.cassandra.auth.existingSecret }}
{{ include "mnemo.secretRef" (dict "env" "MNEMO_CASSANDRA_USERNAME" "secret" $v.cassandra.auth.existingSecret "key" $v.cassandra.auth.usernameKey) }}
{{ include "mnemo.secretRef" (dict "env" "MNEMO_CASSANDRA_PASSWORD" "secret" $v.cassandra.auth.existingSecret "key" $v.cassandra.auth.passwordKey) }}
{{- end }}
{{- if $v.vault.token.existingSecret }}
{{ include "mnemo.secretRef" (dict "env" "MNEMO_VAULT_TOKEN" "secret" $v.vault.token.existingSecret "key" $v.vault.token.key) }}
{{- end }}
{{- end -}}

{{/* Checks that span several values (the schema checks each value alone). */}}
{{- define "mnemo.validate" -}}
{{- $v := .Values -}}
{{- if and $v.vault.agent.enabled $v.vault.token.existingSecret -}}
{{- fail "vault: set either agent.enabled or token.existingSecret, not both" -}}
{{- end -}}
{{- if and $v.vault.agent.enabled (not $v.vault.agent.role) -}}
{{- fail "vault.agent.role is required when vault.agent.enabled is true" -}}
{{- end -}}
{{- if gt (int $v.kafka.minInsync) (int $v.kafka.replication) -}}
{{- fail "kafka.minInsync cannot be more than kafka.replication: no write would ever be acknowledged" -}}
{{- end -}}
{{- if and $v.kafka.tls.clientSecret (eq $v.kafka.securityProtocol "PLAINTEXT") -}}
{{- fail "kafka.tls.clientSecret needs kafka.securityProtocol SSL or SASL_SSL" -}}
{{- end -}}
{{- if and $v.cassandra.tls.clientSecret (not $v.cassandra.tls.caSecret) -}}
{{- fail "cassandra.tls.clientSecret needs cassandra.tls.caSecret (TLS to Cassandra is on when the CA is set)" -}}
{{- end -}}
{{- if and (eq $v.kafka.securityProtocol "SASL_SSL") (not $v.kafka.sasl.existingSecret) -}}
{{- fail "kafka.sasl.existingSecret is required when kafka.securityProtocol is SASL_SSL" -}}
{{- end -}}
{{- if and $v.kafka.sasl.existingSecret (ne $v.kafka.securityProtocol "SASL_SSL") -}}
{{- fail "kafka.sasl.existingSecret needs kafka.securityProtocol SASL_SSL (otherwise the credentials are never used)" -}}
{{- end -}}
{{- if and $v.kafka.tls.caSecret (eq $v.kafka.securityProtocol "PLAINTEXT") -}}
{{- fail "kafka.tls.caSecret needs kafka.securityProtocol SSL or SASL_SSL" -}}
{{- end -}}
{{- if not (or $v.vault.agent.enabled $v.vault.token.existingSecret) -}}
{{- fail "vault: set agent.enabled (Vault Agent writes the token) or token.existingSecret; without a token every pod stops with VAULT_TOKEN_MISSING" -}}
{{- end -}}
{{- if not $v.gateway.keyPepper.existingSecret -}}
{{- fail "gateway.keyPepper.existingSecret is required: API keys are hashed with the pepper, and without a shared one each gateway pod would make its own, so a key would work on one replica only and none would survive a restart" -}}
{{- end -}}
{{- $gateway := include "mnemo.component" (dict "root" . "name" "gateway") | fromJson -}}
{{- if $gateway.autoscaling.keda.enabled -}}
{{- fail "components.gateway.autoscaling.keda: the gateway has no consumer lag; use the CPU autoscaler" -}}
{{- end -}}
{{- range $name := splitList " " (include "mnemo.componentNames" .) -}}
{{- $c := include "mnemo.component" (dict "root" $ "name" $name) | fromJson -}}
{{- $autoscaled := or $c.autoscaling.enabled (and (ne $name "gateway") $c.autoscaling.keda.enabled) -}}
{{- if and $c.enabled $autoscaled (gt (int $c.autoscaling.minReplicas) (int $c.autoscaling.maxReplicas)) -}}
{{- fail (printf "components.%s.autoscaling: minReplicas (%d) cannot be more than maxReplicas (%d)" $name (int $c.autoscaling.minReplicas) (int $c.autoscaling.maxReplicas)) -}}
{{- end -}}
{{- /* a consumer replica beyond the log's partitions holds none: it idles, and it pulls a
       CPU autoscaler's average down so the working ones are scaled too late (KEDA's Kafka
       scaler stops at the partitions by itself: allowIdleConsumers false) */ -}}
{{- if and $c.enabled (ne $name "gateway") (not $c.autoscaling.keda.enabled) -}}
{{- $most := ternary (int $c.autoscaling.maxReplicas) (int $c.replicas) $autoscaled -}}
{{- if gt $most (int $v.kafka.partitions) -}}
{{- fail (printf "components.%s: %d replicas, more than kafka.partitions (%d); a consumer replica beyond the partitions holds none" $name $most (int $v.kafka.partitions)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* TLS CA files from existing Secrets, one directory per dependency. */}}
{{- define "mnemo.tlsVolumes" -}}
{{- range $dep := list "kafka" "cassandra" "qdrant" "vault" }}
{{- $tls := (get $.Values $dep).tls }}
{{- if $tls.caSecret }}
- name: tls-{{ $dep }}
  secret:
    secretName: {{ $tls.caSecret | quote }}
    items:
      - key: {{ $tls.caKey | quote }}
        path: {{ $tls.caKey | quote }}
{{- end }}
{{- if $tls.clientSecret }}
- name: tls-{{ $dep }}-client
  secret:
    secretName: {{ $tls.clientSecret | quote }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- end }}
{{- end -}}

{{- define "mnemo.tlsMounts" -}}
{{- range $dep := list "kafka" "cassandra" "qdrant" "vault" }}
{{- $tls := (get $.Values $dep).tls }}
{{- if $tls.caSecret }}
- name: tls-{{ $dep }}
  mountPath: /etc/mnemo/tls/{{ $dep }}
  readOnly: true
{{- end }}
{{- if $tls.clientSecret }}
- name: tls-{{ $dep }}-client
  mountPath: /etc/mnemo/tls/{{ $dep }}-client
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{- define "mnemo.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "mnemo.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Vault Agent Injector annotations (pods of components and hooks alike). */}}
{{- define "mnemo.vaultAgentAnnotations" -}}
{{- $vault := .Values.vault }}
{{- with .Values.vault.agent }}
{{- if .enabled }}
{{- /* the agent talks to the vault Mnemo is given, trusting the CA Mnemo trusts (a value
       in vault.agent.annotations for the same key wins) */}}
{{- if not (hasKey .annotations "vault.hashicorp.com/service") }}
vault.hashicorp.com/service: {{ $vault.addr | quote }}
{{- end }}
{{- if and $vault.tls.caSecret (not (hasKey .annotations "vault.hashicorp.com/tls-secret")) }}
vault.hashicorp.com/tls-secret: {{ $vault.tls.caSecret | quote }}
vault.hashicorp.com/ca-cert: {{ printf "/vault/tls/%s" $vault.tls.caKey | quote }}
{{- end }}
vault.hashicorp.com/agent-inject: "true"
vault.hashicorp.com/agent-inject-token: "true"
{{- /* the agent runs as the component's uid, so the token file it writes is readable */}}
vault.hashicorp.com/agent-run-as-same-user: "true"
vault.hashicorp.com/role: {{ .role | quote }}
{{- if .authPath }}
vault.hashicorp.com/auth-path: {{ .authPath | quote }}
{{- end }}
{{- range $key, $value := .annotations }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* OTEL_RESOURCE_ATTRIBUTES; $(POD_*) are expanded by the kubelet from earlier env. */}}
{{- define "mnemo.otelResourceAttributes" -}}
{{- $attrs := list "service.namespace=mnemo" (printf "service.version=%s" .root.Chart.AppVersion) "k8s.namespace.name=$(POD_NAMESPACE)" "k8s.pod.name=$(POD_NAME)" (printf "k8s.deployment.name=%s" (include "mnemo.componentFullname" .)) -}}
{{- range $key, $value := .root.Values.otel.resourceAttributes -}}
{{- $attrs = append $attrs (printf "%s=%v" $key $value) -}}
{{- end -}}
{{- join "," $attrs -}}
{{- end -}}

{{/* The gateway's MNEMO_GATEWAY_COMPONENTS: name=URL of each enabled consumer's health
Service, so `mnemo status` (GET /v1/admin/status) reaches every consumer. */}}
{{- define "mnemo.gatewayComponents" -}}
{{- $items := list -}}
{{- range $name := splitList " " (include "mnemo.componentNames" .) -}}
{{- $c := include "mnemo.component" (dict "root" $ "name" $name) | fromJson -}}
{{- if and $c.enabled (ne $name "gateway") -}}
{{- $items = append $items (printf "%s=http://%s:8081" $name (include "mnemo.componentFullname" (dict "root" $ "name" $name))) -}}
{{- end -}}
{{- end -}}
{{- join "," $items -}}
{{- end -}}
