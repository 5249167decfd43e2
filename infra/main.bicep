// The CRM sales copilot's whole Azure deployment (resource-group scope):
//   managed identity, Log Analytics + Application Insights, Storage (queues, anchors,
//   deployment package), Key Vault, PostgreSQL Flexible Server, Function App (Flex
//   Consumption), Azure Bot (Teams channel + SSO connection), optional Azure OpenAI,
//   optional VNet with private endpoints (on by default).
// Provision: `make infra-deploy` (docs/ADMIN.md). Checked offline by tests/infra (pycep parse,
// checkov, the project's policy and template-to-code consistency tests); the Bicep compiler
// itself is not run there (docs/ADMIN.md, "What the checks cover").

@description('Short name for this deployment (3-12 lowercase letters/digits): the prefix of every resource name.')
@minLength(3)
@maxLength(12)
param environmentName string
param location string = resourceGroup().location
param tags object = {}

// --- the bot's Entra app registration (docs/ADMIN.md, "Entra app") ----------------------
@description('Client id of the Entra app registration the bot and SSO use (MicrosoftAppId).')
param botAppId string
@secure()
@description('That app\'s client secret (MicrosoftAppPassword): stored in Key Vault only.')
param botClientSecret string
@description('The day that client secret expires (yyyy-mm-dd, shown on the app registration): set on the vault secret, and an alert fires 30 days before.')
param botClientSecretExpiresOn string
@description('Host name reps reach the bot at; empty = the Function App\'s default host name.')
param customDomain string = ''
param ssoConnectionName string = 'crm-copilot-sso'

// --- the Teams app package (make infra-package): what reps see about its publisher ------
@description('Publisher shown on the app\'s page in Teams (1-32 characters): your organisation.')
@minLength(1)
@maxLength(32)
param publisherName string
@description('Your https page about the copilot (the app\'s website link in Teams).')
param websiteUrl string
@description('Your https privacy statement for the copilot.')
param privacyUrl string
@description('Your https terms of use for the copilot.')
param termsUrl string

// --- the systems the copilot reaches --------------------------------------------------
@description('Which CRM connector: dataverse (Dynamics 365 Sales) or reference (the copilot\'s own CRM server).')
@allowed([
  'dataverse'
  'reference'
])
param crmKind string = 'dataverse'
@description('The Dataverse environment URL, e.g. https://contoso.crm.dynamics.com (dataverse): the MCP endpoint and the OAuth resource derive from it.')
param crmUrl string = ''
@description('The CRM\'s MCP endpoint (streamable HTTP); empty = <crmUrl>/api/mcp (dataverse).')
param crmMcpUrl string = ''
@description('The CRM\'s OAuth resource (audience); empty = crmUrl (dataverse).')
param crmResource string = ''
param crmRecordUrlTemplate string = ''
param entraAuthority string = 'https://login.microsoftonline.com'
param graphBaseUrl string = 'https://graph.microsoft.com/v1.0'
param graphResource string = 'https://graph.microsoft.com'
param phoneRegion string = 'US'
param retentionDays int = 30

// --- model ---------------------------------------------------------------------------
@description('Deploy an Azure OpenAI account and chat deployment and point COPILOT_MODEL at it.')
param deployOpenAi bool = true
param openAiModelName string = 'gpt-4.1'
param openAiModelVersion string = '2025-04-14'
param openAiCapacity int = 50
param openAiApiVersion string = '2024-10-21'
@description('COPILOT_MODEL when deployOpenAi is false (provider:model); never offline.')
param copilotModel string = ''
param fallbackModels string = ''

// --- database ------------------------------------------------------------------------
@description('Object id of the Entra group (or user) administering PostgreSQL: who runs db migrate.')
param postgresAdminObjectId string
@description('Display name of that group or user (its PostgreSQL role name).')
param postgresAdminName string
@allowed([
  'Group'
  'User'
])
param postgresAdminType string = 'Group'
@description('Also allow password logins (the app login\'s password then lives in Key Vault, database-url). Off = Entra only.')
param postgresPasswordAuth bool = false
@secure()
param postgresAdminPassword string = ''
@description('PostgreSQL compute. Its max_connections (postgresSkus) bounds the app\'s pools: see dbPoolMax.')
@allowed([
  'Standard_B1ms'
  'Standard_B2s'
  'Standard_B2ms'
  'Standard_B4ms'
  'Standard_D2ds_v5'
  'Standard_D4ds_v5'
  'Standard_D8ds_v5'
  'Standard_E2ds_v5'
  'Standard_E4ds_v5'
])
param postgresSkuName string = 'Standard_D2ds_v5'
@description('Connections the app\'s pools leave free: the 15 Azure reserves for replication and monitoring, plus the admin\'s own (db migrate, the doctor, psql).')
@minValue(15)
param postgresReservedConnections int = 25

// --- network -------------------------------------------------------------------------
@description('VNet integration and private endpoints for every data store (recommended).')
param enableVnet bool = true
@description('Opens the data stores\' public endpoints (Storage, Key Vault, PostgreSQL, OpenAI). Only for a trial without the VNet.')
param allowPublicDataAccess bool = false
@description('One admin machine\'s public IP let through the data stores\' firewalls (to run db migrate); empty = none.')
param adminIpAddress string = ''

// --- operations ----------------------------------------------------------------------
@description('Object id of the admin (group) granted Key Vault Secrets Officer for make infra-secrets and rotation.')
param secretsOfficerObjectId string = ''
@description('What secretsOfficerObjectId is: a role assignment fails when this does not match (a user\'s object id with Group).')
@allowed([
  'Group'
  'User'
  'ServicePrincipal'
])
param secretsOfficerPrincipalType string = 'Group'
@description('Bump after deleting the Key Vault: a purge-protected vault\'s name stays taken for 90 days, and the vault name derives from this.')
@minValue(1)
param vaultGeneration int = 1
@description('Where the operational alerts are emailed (audit seal failure, poison-queue turn, 5xx rate, PostgreSQL connections, bot secret expiry).')
param alertEmail string
param langsmithTracing bool = false
param langsmithProject string = 'crm-copilot'
param anchorRetentionDays int = 365
param turnQueueName string = 'copilot-turns'
param maximumInstanceCount int = 40

var suffix = uniqueString(subscription().id, resourceGroup().id, environmentName)
var baseName = '${environmentName}-${take(suffix, 6)}'
var allTags = union(tags, {
  'azd-env-name': environmentName
  application: 'crm-copilot'
})
var databaseName = 'copilot'
// Unique per subscription, resource group, environment and generation (at most 24 characters).
var vaultName = take('kv-${environmentName}-${uniqueString(subscription().id, resourceGroup().id, environmentName, string(vaultGeneration))}', 24)

// Each compute's tier and default max_connections (Azure Database for PostgreSQL flexible
// server, "Limits": the defaults follow the memory; 15 of them are Azure's own).
var postgresSkus = {
  Standard_B1ms: {
    tier: 'Burstable'
    maxConnections: 50
  }
  Standard_B2s: {
    tier: 'Burstable'
    maxConnections: 429
  }
  Standard_B2ms: {
    tier: 'Burstable'
    maxConnections: 859
  }
  Standard_B4ms: {
    tier: 'Burstable'
    maxConnections: 1718
  }
  Standard_D2ds_v5: {
    tier: 'GeneralPurpose'
    maxConnections: 859
  }
  Standard_D4ds_v5: {
    tier: 'GeneralPurpose'
    maxConnections: 1718
  }
  Standard_D8ds_v5: {
    tier: 'GeneralPurpose'
    maxConnections: 3437
  }
  Standard_E2ds_v5: {
    tier: 'MemoryOptimized'
    maxConnections: 1718
  }
  Standard_E4ds_v5: {
    tier: 'MemoryOptimized'
    maxConnections: 3437
  }
}
var postgresSku = postgresSkus[postgresSkuName]
var postgresMaxConnections = postgresSku.maxConnections
// One worker process per instance opens three pools of COPILOT_DB_POOL_MAX-based sizes: the
// service's (1x), the run locks' (4x, copilot/runner.py open_service) and the webhook edge's (1x,
// functions/host.py). At full scale-out every instance may fill all three, so the pool size is
// what the server's connections, less the reserve, allow per instance, and at most the code's
// default of 10. Below 2 the functionApp module's @minValue refuses the deployment: pick a
// larger SKU or fewer instances.
var connectionsPerPoolMax = 6
var dbPoolMax = min(10, (postgresMaxConnections - postgresReservedConnections) / (maximumInstanceCount * connectionsPerPoolMax))
var openAiDeploymentName = 'chat'

module identity 'modules/identity.bicep' = {
  name: 'identity'
  params: {
    name: 'id-${baseName}'
    location: location
    tags: allTags
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  params: {
    workspaceName: 'log-${baseName}'
    appInsightsName: 'appi-${baseName}'
    location: location
    tags: allTags
    publisherPrincipalId: identity.outputs.principalId
  }
}

module storage 'modules/storage.bicep' = {
  name: 'storage'
  params: {
    workspaceId: monitoring.outputs.workspaceId
    name: toLower(take('st${replace(environmentName, '-', '')}${suffix}', 24))
    location: location
    tags: allTags
    identityPrincipalId: identity.outputs.principalId
    turnQueueName: turnQueueName
    anchorRetentionDays: anchorRetentionDays
    allowPublicAccess: allowPublicDataAccess || (!enableVnet)
    adminIpAddress: adminIpAddress
  }
}

module vault 'modules/keyvault.bicep' = {
  name: 'keyvault'
  params: {
    workspaceId: monitoring.outputs.workspaceId
    name: vaultName
    location: location
    tags: allTags
    readerPrincipalId: identity.outputs.principalId
    botClientSecret: botClientSecret
    botClientSecretExpiresOn: botClientSecretExpiresOn
    secretsOfficerObjectId: secretsOfficerObjectId
    secretsOfficerType: secretsOfficerPrincipalType
    allowPublicAccess: allowPublicDataAccess || (!enableVnet)
    adminIpAddress: adminIpAddress
  }
}

module postgres 'modules/postgres.bicep' = {
  name: 'postgres'
  params: {
    workspaceId: monitoring.outputs.workspaceId
    name: 'psql-${baseName}'
    location: location
    tags: allTags
    databaseName: databaseName
    entraAdminObjectId: postgresAdminObjectId
    entraAdminName: postgresAdminName
    entraAdminType: postgresAdminType
    appIdentityName: identity.outputs.name
    passwordAuth: postgresPasswordAuth
    administratorPassword: postgresAdminPassword
    allowPublicAccess: allowPublicDataAccess || (!enableVnet)
    adminIpAddress: adminIpAddress
    skuName: postgresSkuName
    skuTier: postgresSku.tier
  }
}

module openai 'modules/openai.bicep' = if (deployOpenAi) {
  name: 'openai'
  params: {
    name: 'oai-${baseName}'
    location: location
    tags: allTags
    deploymentName: openAiDeploymentName
    modelName: openAiModelName
    modelVersion: openAiModelVersion
    capacity: openAiCapacity
    keyVaultName: vault.outputs.name
    userPrincipalId: identity.outputs.principalId
    allowPublicAccess: allowPublicDataAccess || (!enableVnet)
    adminIpAddress: adminIpAddress
  }
}

module network 'modules/network.bicep' = if (enableVnet) {
  name: 'network'
  params: {
    name: 'vnet-${baseName}'
    location: location
    tags: allTags
  }
}

// One private endpoint per data store, each a module of its own. A loop's array must be known
// when the deployment starts (BCP178/BCP182), and the stores' ids are module outputs, so no loop
// can range over them; tests/infra/test_template_deploy_start.py holds every loop and condition
// to that rule. Each endpoint waits for the previous one on the same resource (dependsOn): two
// operations on one server or account at once fail with "another operation is in progress".
// The `enableVnet ?` guards keep ARM from reading the outputs of a network module not deployed.
module blobEndpoint 'modules/privateendpoint.bicep' = if (enableVnet) {
  name: 'pe-blob'
  params: {
    name: 'pe-blob-${baseName}'
    location: location
    tags: allTags
    subnetId: enableVnet ? network.outputs.endpointSubnetId : ''
    targetId: storage.outputs.id
    groupId: 'blob'
    zoneId: enableVnet ? network.outputs.blobZoneId : ''
  }
}

module queueEndpoint 'modules/privateendpoint.bicep' = if (enableVnet) {
  name: 'pe-queue'
  params: {
    name: 'pe-queue-${baseName}'
    location: location
    tags: allTags
    subnetId: enableVnet ? network.outputs.endpointSubnetId : ''
    targetId: storage.outputs.id
    groupId: 'queue'
    zoneId: enableVnet ? network.outputs.queueZoneId : ''
  }
  dependsOn: [
    blobEndpoint
  ]
}

module tableEndpoint 'modules/privateendpoint.bicep' = if (enableVnet) {
  name: 'pe-table'
  params: {
    name: 'pe-table-${baseName}'
    location: location
    tags: allTags
    subnetId: enableVnet ? network.outputs.endpointSubnetId : ''
    targetId: storage.outputs.id
    groupId: 'table'
    zoneId: enableVnet ? network.outputs.tableZoneId : ''
  }
  dependsOn: [
    queueEndpoint
  ]
}

module vaultEndpoint 'modules/privateendpoint.bicep' = if (enableVnet) {
  name: 'pe-vault'
  params: {
    name: 'pe-vault-${baseName}'
    location: location
    tags: allTags
    subnetId: enableVnet ? network.outputs.endpointSubnetId : ''
    targetId: vault.outputs.id
    groupId: 'vault'
    zoneId: enableVnet ? network.outputs.vaultZoneId : ''
  }
}

// After the whole postgres module (its output): the server's configurations and firewall rules
// are done one at a time before the endpoint starts (ServerIsBusy otherwise).
module postgresEndpoint 'modules/privateendpoint.bicep' = if (enableVnet) {
  name: 'pe-postgres'
  params: {
    name: 'pe-postgres-${baseName}'
    location: location
    tags: allTags
    subnetId: enableVnet ? network.outputs.endpointSubnetId : ''
    targetId: postgres.outputs.id
    groupId: 'postgresqlServer'
    zoneId: enableVnet ? network.outputs.postgresZoneId : ''
  }
}

module openAiEndpoint 'modules/privateendpoint.bicep' = if (enableVnet && deployOpenAi) {
  name: 'pe-openai'
  params: {
    name: 'pe-openai-${baseName}'
    location: location
    tags: allTags
    subnetId: enableVnet ? network.outputs.endpointSubnetId : ''
    targetId: deployOpenAi ? openai.outputs.id : ''
    groupId: 'account'
    zoneId: enableVnet ? network.outputs.openAiZoneId : ''
  }
}

module functionApp 'modules/functionapp.bicep' = {
  name: 'functionapp'
  params: {
    workspaceId: monitoring.outputs.workspaceId
    databaseEntraAuth: !postgresPasswordAuth
    name: 'func-${baseName}'
    planName: 'plan-${baseName}'
    location: location
    tags: allTags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageBlobEndpoint: storage.outputs.blobEndpoint
    storageQueueEndpoint: storage.outputs.queueEndpoint
    storageTableEndpoint: storage.outputs.tableEndpoint
    deploymentContainerUrl: storage.outputs.deploymentContainerUrl
    appInsightsConnectionString: monitoring.outputs.connectionString
    keyVaultUri: vault.outputs.uri
    subnetId: enableVnet ? network.outputs.appSubnetId : ''
    customDomain: customDomain
    maximumInstanceCount: maximumInstanceCount
    dbPoolMax: dbPoolMax
    botAppId: botAppId
    turnQueueName: turnQueueName
    ssoConnectionName: ssoConnectionName
    entraAuthority: entraAuthority
    crmKind: crmKind
    crmUrl: crmUrl
    crmMcpUrl: crmMcpUrl
    crmResource: crmResource
    graphBaseUrl: graphBaseUrl
    graphResource: graphResource
    copilotModel: deployOpenAi ? 'azure_openai:${openAiDeploymentName}' : copilotModel
    fallbackModels: fallbackModels
    retentionDays: retentionDays
    phoneRegion: phoneRegion
    recordUrlTemplate: crmRecordUrlTemplate
    auditAnchorContainer: storage.outputs.anchorContainerName
    deployOpenAi: deployOpenAi
    openAiEndpoint: deployOpenAi ? openai.outputs.endpoint : ''
    openAiApiVersion: openAiApiVersion
    langsmithTracing: langsmithTracing
    langsmithProject: langsmithProject
  }
}

module alerts 'modules/alerts.bicep' = {
  name: 'alerts'
  params: {
    namePrefix: baseName
    tags: allTags
    appInsightsId: monitoring.outputs.appInsightsId
    workspaceId: monitoring.outputs.workspaceId
    postgresId: postgres.outputs.id
    postgresMaxConnections: postgresMaxConnections
    alertEmail: alertEmail
    botSecretExpiresOn: botClientSecretExpiresOn
  }
}

module bot 'modules/bot.bicep' = {
  name: 'bot'
  params: {
    name: 'bot-${baseName}'
    tags: allTags
    botAppId: botAppId
    botClientSecret: botClientSecret
    messagingEndpoint: functionApp.outputs.messagingEndpoint
    botDomain: functionApp.outputs.botDomain
    ssoConnectionName: ssoConnectionName
  }
}

// What `python -m bot package` reads (same names as its environment variables) ...
output MicrosoftAppId string = botAppId
output BOT_DOMAIN string = functionApp.outputs.botDomain
output PUBLISHER_NAME string = publisherName
output WEBSITE_URL string = websiteUrl
output PRIVACY_URL string = privacyUrl
output TERMS_URL string = termsUrl
// ... and what the admin needs next (docs/ADMIN.md).
output functionAppName string = functionApp.outputs.name
output messagingEndpoint string = functionApp.outputs.messagingEndpoint
output botName string = bot.outputs.name
output keyVaultName string = vault.outputs.name
output storageAccountName string = storage.outputs.name
output auditAnchorContainerUrl string = storage.outputs.anchorContainerUrl
output auditAnchorContainer string = storage.outputs.anchorContainerName
output postgresHost string = postgres.outputs.host
output postgresDatabase string = postgres.outputs.databaseName
output appRoleGrantSql string = postgres.outputs.appRoleGrantSql
output managedIdentityClientId string = identity.outputs.clientId
output managedIdentityName string = identity.outputs.name
