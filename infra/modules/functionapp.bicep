// The Function App (Linux, Python 3.11, Flex Consumption) that hosts function_app.py:
// POST /api/messages (Bot Framework webhook), the turn queue and poison-queue triggers, the
// retention timer and /api/health. It runs as the user-assigned identity, which also resolves
// its Key Vault references (keyVaultReferenceIdentity). Every app setting below is one the
// code (or the Functions host / a model provider client it uses) reads: tests/infra checks
// that against copilot/settings.py, bot/settings.py and functions/.

param name string
param planName string
param location string
param tags object
param identityId string
param identityClientId string
param storageBlobEndpoint string
param storageQueueEndpoint string
param storageTableEndpoint string
param deploymentContainerUrl string
param appInsightsConnectionString string
param keyVaultUri string
@description('Log Analytics workspace the resource\'s diagnostic logs and metrics go to.')
param workspaceId string
@description('Subnet the app integrates with (VNet mode); empty = none.')
param subnetId string = ''
@description('Host name Teams reaches the bot at; empty = the Function App\'s default host name.')
param customDomain string = ''
@minValue(1)
param maximumInstanceCount int = 40
@description('COPILOT_DB_POOL_MAX: main.bicep computes it from the PostgreSQL SKU and maximumInstanceCount. Below 2 a turn and its lock would queue behind each other.')
@minValue(2)
@maxValue(10)
param dbPoolMax int
@allowed([
  2048
  4096
])
param instanceMemoryMB int = 2048

param botAppId string
param turnQueueName string
param ssoConnectionName string
param entraAuthority string
param crmKind string
param crmUrl string
param crmMcpUrl string
param crmResource string
param graphBaseUrl string
param graphResource string
param copilotModel string
param fallbackModels string = ''
param retentionDays int = 30
param phoneRegion string = 'US'
param recordUrlTemplate string = ''
@description('Log in to PostgreSQL with the managed identity\'s Entra token (no password in DATABASE_URL).')
param databaseEntraAuth bool = true
@description('The audit-anchors container (append blobs, time-based immutability that allows appends).')
param auditAnchorContainer string
param deployOpenAi bool = false
param openAiEndpoint string = ''
param openAiApiVersion string = '2024-10-21'
param langsmithTracing bool = false
param langsmithProject string = 'crm-copilot'

var secretRef = '@Microsoft.KeyVault(SecretUri=${keyVaultUri}secrets/'

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  //checkov:skip=CKV_AZURE_225:Zone redundancy is a production sizing choice (Flex Consumption supports it only in some regions); a pilot runs without it
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

// BOT_DOMAIN: the app's default host name (the site cannot read its own properties here).
var botDomain = empty(customDomain) ? '${name}.azurewebsites.net' : customDomain

var coreSettings = [
  // The Functions host: identity-based storage (shared keys are off) and telemetry.
  {
    name: 'AzureWebJobsStorage__credential'
    value: 'managedidentity'
  }
  {
    name: 'AzureWebJobsStorage__clientId'
    value: identityClientId
  }
  {
    name: 'AzureWebJobsStorage__blobServiceUri'
    value: storageBlobEndpoint
  }
  {
    name: 'AzureWebJobsStorage__queueServiceUri'
    value: storageQueueEndpoint
  }
  {
    name: 'AzureWebJobsStorage__tableServiceUri'
    value: storageTableEndpoint
  }
  {
    name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
    value: appInsightsConnectionString
  }
  {
    name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
    value: 'ClientId=${identityClientId};Authorization=AAD'
  }
  {
    name: 'AZURE_CLIENT_ID'
    value: identityClientId
  }
  // copilot/settings.py
  {
    name: 'COPILOT_ENVIRONMENT'
    value: 'deployed'
  }
  {
    name: 'DATABASE_URL'
    value: '${secretRef}database-url)'
  }
  {
    name: 'COPILOT_DATABASE_ENTRA_AUTH'
    value: databaseEntraAuth ? 'true' : 'false'
  }
  {
    name: 'COPILOT_AUDIT_HMAC_KEYS'
    value: '${secretRef}audit-hmac-keys)'
  }
  // Audit anchors in Azure append blobs, written with the managed identity.
  {
    name: 'COPILOT_AUDIT_ANCHOR_STORE'
    value: 'blob'
  }
  {
    name: 'COPILOT_AUDIT_ANCHOR_ACCOUNT_URL'
    value: storageBlobEndpoint
  }
  {
    name: 'COPILOT_AUDIT_ANCHOR_CONTAINER'
    value: auditAnchorContainer
  }
  {
    name: 'COPILOT_AUDIT_ANCHOR_CLIENT_ID'
    value: identityClientId
  }
  {
    name: 'COPILOT_TRACE_PSEUDONYM_KEY'
    value: '${secretRef}trace-pseudonym-key)'
  }
  {
    name: 'COPILOT_MODEL'
    value: copilotModel
  }
  {
    name: 'COPILOT_FALLBACK_MODELS'
    value: fallbackModels
  }
  {
    name: 'COPILOT_PHONE_REGION'
    value: phoneRegion
  }
  {
    name: 'CRM_KIND'
    value: crmKind
  }
  {
    name: 'GRAPH_BASE_URL'
    value: graphBaseUrl
  }
  {
    name: 'GRAPH_RESOURCE'
    value: graphResource
  }
  {
    name: 'ENTRA_AUTHORITY'
    value: entraAuthority
  }
  {
    name: 'MicrosoftAppId'
    value: botAppId
  }
  {
    name: 'MicrosoftAppPassword'
    value: '${secretRef}microsoft-app-password)'
  }
  // bot/settings.py
  {
    name: 'MicrosoftAppTenantId'
    value: tenant().tenantId
  }
  {
    name: 'MicrosoftAppType'
    value: 'SingleTenant'
  }
  {
    name: 'COPILOT_TOKEN_ENCRYPTION_KEY'
    value: '${secretRef}token-encryption-key)'
  }
  {
    name: 'COPILOT_SSO_CONNECTION'
    value: ssoConnectionName
  }
  {
    name: 'COPILOT_DB_POOL_MAX'
    value: string(dbPoolMax)
  }
  {
    name: 'COPILOT_DB_MAX_INSTANCES'
    value: string(maximumInstanceCount)
  }
  {
    name: 'COPILOT_TURN_QUEUE'
    value: turnQueueName
  }
  {
    name: 'COPILOT_RETENTION_DAYS'
    value: string(retentionDays)
  }
  {
    name: 'BOT_DOMAIN'
    value: botDomain
  }
  {
    name: 'CRM_RECORD_URL_TEMPLATE'
    value: recordUrlTemplate
  }
  {
    name: 'LANGSMITH_TRACING'
    value: langsmithTracing ? 'true' : 'false'
  }
  {
    name: 'LANGSMITH_PROJECT'
    value: langsmithProject
  }
]

// The CRM's endpoints: CRM_URL for Dataverse (the MCP endpoint and the OAuth resource derive
// from it), each explicit one only when given (an empty setting would not mean "derive").
var crmUrlSettings = empty(crmUrl) ? [] : [
  {
    name: 'CRM_URL'
    value: crmUrl
  }
]
var crmMcpUrlSettings = empty(crmMcpUrl) ? [] : [
  {
    name: 'CRM_MCP_URL'
    value: crmMcpUrl
  }
]
var crmResourceSettings = empty(crmResource) ? [] : [
  {
    name: 'CRM_RESOURCE'
    value: crmResource
  }
]

// Read by langchain-openai / the openai client (COPILOT_MODEL=azure_openai:<deployment>).
var modelSettings = deployOpenAi ? [
  {
    name: 'AZURE_OPENAI_ENDPOINT'
    value: openAiEndpoint
  }
  {
    name: 'OPENAI_API_VERSION'
    value: openAiApiVersion
  }
  {
    name: 'AZURE_OPENAI_API_KEY'
    value: '${secretRef}azure-openai-api-key)'
  }
] : []

var tracingSettings = langsmithTracing ? [
  {
    name: 'LANGSMITH_API_KEY'
    value: '${secretRef}langsmith-api-key)'
  }
] : []

resource site 'Microsoft.Web/sites@2024-04-01' = {
  //checkov:skip=CKV_AZURE_17:Client certificates: the Bot Framework Connector presents none (it authenticates with a signed JWT)
  //checkov:skip=CKV_AZURE_222:Teams (the Bot Framework Connector) must reach POST /api/messages from the internet; requests are JWT-validated and the data stores stay private
  //checkov:skip=CKV_AZURE_212:Flex Consumption scales instances per event; there is no fixed instance count to keep for failover
  //checkov:skip=CKV_AZURE_213:App Service health check does not apply to Flex Consumption; /api/health answers liveness for external probes
  name: name
  location: location
  tags: tags
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    clientCertEnabled: false
    publicNetworkAccess: 'Enabled'
    keyVaultReferenceIdentity: identityId
    virtualNetworkSubnetId: empty(subnetId) ? null : subnetId
    siteConfig: {
      minTlsVersion: '1.2'
      ftpsState: 'Disabled'
      http20Enabled: true
      detailedErrorLoggingEnabled: true
      httpLoggingEnabled: true
      requestTracingEnabled: true
      appSettings: concat(coreSettings, crmUrlSettings, crmMcpUrlSettings, crmResourceSettings, modelSettings, tracingSettings)
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: deploymentContainerUrl
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
      }
      runtime: {
        name: 'python'
        version: '3.11'
      }
    }
  }
}

// Audit and diagnostic logs, and metrics, to Log Analytics (alerts in alerts.bicep query them).
resource siteDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: site
  properties: {
    workspaceId: workspaceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

output name string = site.name
output botDomain string = botDomain
output messagingEndpoint string = 'https://${botDomain}/api/messages'
